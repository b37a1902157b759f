"""`loopwise training ...` with the character vocabulary of before tasks brought their own: the
global 19-character alphabet, no unknown token. Its JSON, compared with a run of an older commit
(same arguments, same OMP_NUM_THREADS), shows whether a built-in task's results changed only
through the vocabulary.

    OMP_NUM_THREADS=1 python bench/training_old_vocabulary.py training search arithmetic --preset smoke --json
"""

import runpy
import sys

import loopwise.training.tasks as tasks
from loopwise.training import session

tasks.task_characters = lambda task: tasks.ALPHABET
_vocab = session.Vocab
session.Vocab = lambda chars, unk=False: _vocab(chars)
sys.argv = ["loopwise", *sys.argv[1:]]
runpy.run_module("loopwise", run_name="__main__")
