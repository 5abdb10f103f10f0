"""bench/compare.py names the commit it measured (and whether the checkout had changes) in RESULTS.md's
versions line: the file is committed after the run, so the commit it lands in is not the code it measured."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.bench_scripts import load_bench_script


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_commit_then_changes_then_no_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compare = load_bench_script("compare")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.py").write_text("x = 1\n")
    (repo / "bench").mkdir()
    for out in compare.OUTPUTS:
        (repo / out).write_text("a previous run\n")
    _git(repo, "add", "a.py", *compare.OUTPUTS)
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "one")
    monkeypatch.setattr(compare, "ROOT", repo)
    head = _git(repo, "rev-parse", "--short", "HEAD")
    assert compare.git_commit() == head
    (repo / "untracked.txt").write_text("results")  # untracked files (a fresh RESULTS.md) do not count
    assert compare.git_commit() == head
    for out in compare.OUTPUTS:  # nor a previous compare's output, not yet committed
        (repo / out).write_text("another run\n")
    assert compare.git_commit() == head
    (repo / "a.py").write_text("x = 2\n")
    assert compare.git_commit() == f"{head} + changes"
    assert compare.versions()["this project"].endswith(f"at {head} + changes")
    monkeypatch.setattr(compare, "ROOT", tmp_path / "elsewhere")
    (tmp_path / "elsewhere").mkdir()
    assert compare.git_commit() is None
