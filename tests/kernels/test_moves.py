"""The kernel move vocabulary: checked when made, frozen, one text form, one JSON form that reads
back what runs stored before the moves were typed."""

import dataclasses
import json

import pytest

from loopwise.kernels.moves import (
    PARAMETER_MOVES,
    STRUCTURAL_MOVES,
    MoveKind,
    ParameterMove,
    StructuralMove,
    move_from_json,
    moves_text,
    parse_moves,
)
from loopwise.kernels.profile.findings import Finding


def test_moves_are_typed_and_frozen():
    block, vectorize = ParameterMove.of(block=512, warps=4), StructuralMove("vectorize_loads")
    assert block.kind is MoveKind.PARAMETER and vectorize.kind is MoveKind.STRUCTURAL
    assert block.settings == (("block", 512), ("warps", 4))
    assert vectorize.description == STRUCTURAL_MOVES["vectorize_loads"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        vectorize.name = "split_k"
    assert len({block, ParameterMove.of(block=512, warps=4), vectorize, StructuralMove("vectorize_loads")}) == 2


@pytest.mark.parametrize("make", [
    lambda: StructuralMove("make_it_fast"),
    lambda: ParameterMove.of(tile=128),
    lambda: ParameterMove.of(block=0),
    lambda: ParameterMove.of(warps=-4),
    lambda: ParameterMove.of(block=True),
    lambda: ParameterMove(()),
    lambda: ParameterMove((("block", 128), ("block", 256))),
])
def test_a_move_outside_the_vocabulary_is_an_error(make):
    with pytest.raises(ValueError):
        make()


def test_text_form_is_what_prompts_showed_for_dict_and_str_moves():
    moves = [ParameterMove.of(warps=4), StructuralMove("fuse_kernels"), ParameterMove.of(block=512, warps=8)]
    assert moves_text(moves) == "warps=4; fuse_kernels; block=512, warps=8"
    assert parse_moves(moves_text(moves)) == moves
    assert parse_moves("warps=8; not_a_move; tile=3; block=0") == [ParameterMove.of(warps=8)]


def test_json_form_is_the_stored_dict_or_name():
    for move in (ParameterMove.of(block=256, chunk=32), StructuralMove("split_k")):
        assert move_from_json(json.loads(json.dumps(move.to_json()))) == move
    assert ParameterMove.of(block=256).to_json() == {"block": 256}
    assert StructuralMove("split_k").to_json() == "split_k"
    with pytest.raises(ValueError):
        move_from_json(42)


def test_a_finding_stored_with_dict_and_str_moves_still_loads():
    stored = ('{"tool": "occupancy", "guidance": "Occupancy is 25%.", "evidence": {"occupancy": 0.25}, '
              '"severity": "medium", "score": 0.4, "moves": ["reduce_registers", {"warps": 8}, {"block": 128}]}')
    finding = Finding.model_validate_json(stored)
    assert finding.moves == (StructuralMove("reduce_registers"), ParameterMove.of(warps=8), ParameterMove.of(block=128))
    assert json.loads(finding.model_dump_json()) == json.loads(stored)
    assert finding.as_note().evidence["moves"] == "reduce_registers; warps=8; block=128"
    json_form = {"anyOf": [{"additionalProperties": {"type": "integer"}, "type": "object"}, {"type": "string"}]}
    assert Finding.model_json_schema()["properties"]["moves"]["items"] == json_form


def test_the_parameter_knobs_are_three():
    assert PARAMETER_MOVES == ("block", "warps", "chunk")


def test_the_proposers_structural_steps_name_moves_of_the_vocabulary():
    from loopwise.kernels.expert.proposer import STRUCTURAL

    assert set(STRUCTURAL) <= set(STRUCTURAL_MOVES)
