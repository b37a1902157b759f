"""Scratchpad targets: the four built in, a user's own file, and one-line errors for bad ones."""

from __future__ import annotations

import pytest

from loopwise.errors import UserError
from loopwise.memory.targets import builtin_targets, load_target


def test_builtin_targets_load_with_the_documented_capacities():
    assert builtin_targets() == ["gpu-sm-shared", "neuroncore-v2", "scratchpad-1mib", "scratchpad-96mib"]
    neuron = load_target("neuroncore-v2")
    assert neuron.scratchpad.bytes == 24 * 2**20 and neuron.scratchpad.partitions == 128
    assert neuron.accumulator.bytes == 2 * 2**20 and neuron.dma.descriptor_per_partition
    assert load_target("gpu-sm-shared").scratchpad.bytes == 227 * 1024
    assert load_target("scratchpad-1mib").scratchpad.bytes == 2**20
    assert load_target("scratchpad-96mib").scratchpad.bytes == 96 * 2**20


def test_a_users_yaml_file_is_validated(tmp_path):
    good = tmp_path / "mine.yaml"
    good.write_text("name: mine\nscratchpad: {bytes: 1048576}\ndram: {bandwidth_gbs: 100}\n")
    assert load_target(str(good)).scratchpad.partitions == 1
    typo = tmp_path / "typo.yaml"
    typo.write_text("name: t\nscratchpad: {bytes: 1024, partition: 4}\ndram: {bandwidth_gbs: 1}\n")
    with pytest.raises(UserError, match=r"typo.yaml: scratchpad.partition: Extra inputs"):
        load_target(str(typo))
    negative = tmp_path / "neg.yaml"
    negative.write_text("name: n\nscratchpad: {bytes: -1}\ndram: {bandwidth_gbs: 1}\n")
    with pytest.raises(UserError, match="scratchpad.bytes: Input should be greater than 0"):
        load_target(str(negative))
    with pytest.raises(UserError, match="unknown target 'tpu'"):
        load_target("tpu")
    with pytest.raises(UserError, match="no such file"):
        load_target(str(tmp_path / "missing.yaml"))


def test_compute_and_energy_figures_carry_their_source_and_energy_is_left_out_where_unknown(tmp_path):
    neuron = load_target("neuroncore-v2")
    assert (neuron.compute.matrix_tflops, neuron.compute.vector_tflops) == (92, 2.3)
    assert "aws-neuron-sdk" in neuron.compute.source
    for name in ("neuroncore-v2", "gpu-sm-shared", "scratchpad-1mib", "scratchpad-96mib"):
        assert load_target(name).energy is None  # nobody publishes these: no figure is made up
        assert load_target(name).compute is not None
    unsourced = tmp_path / "unsourced.yaml"
    unsourced.write_text("name: u\nscratchpad: {bytes: 1024}\ndram: {bandwidth_gbs: 1}\n"
                         "energy: {dram_pj_per_byte: 20, scratchpad_pj_per_byte: 2}\n")
    with pytest.raises(UserError, match="energy.source: Field required"):
        load_target(str(unsourced))
