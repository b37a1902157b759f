"""The test tree mirrors the package: every folder holding tests names a package folder, and test
modules outside a Python package (imported by basename) have distinct basenames."""

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "loopwise"


def _test_modules() -> list[Path]:
    return sorted(TESTS.rglob("test_*.py"))


def test_every_test_folder_mirrors_a_package_folder():
    folders = {path.parent.relative_to(TESTS) for path in _test_modules()}
    assert sorted(str(f) for f in folders if not (PACKAGE / f).is_dir()) == []


def test_test_modules_imported_by_basename_have_distinct_basenames():
    outside_packages = [p for p in _test_modules() if not (p.parent / "__init__.py").exists()]
    twice = [name for name, count in Counter(p.name for p in outside_packages).items() if count > 1]
    assert twice == []
