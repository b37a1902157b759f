"""Roofline: measured device ceilings and the speed-of-light floor of a problem."""

from loopwise.kernels.roofline.ceilings import Ceilings, load_or_measure, measure_ceilings
from loopwise.kernels.roofline.floor import Floor, Work, count_work, peak_tflops, speed_of_light

__all__ = [
    "Ceilings",
    "Floor",
    "Work",
    "count_work",
    "load_or_measure",
    "measure_ceilings",
    "peak_tflops",
    "speed_of_light",
]
