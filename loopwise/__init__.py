"""loopwise: optimizes ML systems the way an expert does: diagnose, propose, measure, search."""

import logging as _logging

__version__ = "0.1.0"

# A library never configures logging for its host application: only a NullHandler here.
_logging.getLogger(__name__).addHandler(_logging.NullHandler())

__all__ = ["__version__"]
