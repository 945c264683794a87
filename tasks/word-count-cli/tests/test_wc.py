"""Hidden tests for /app/wc.py, run as a subprocess exactly as a user would."""

import subprocess
import sys
from pathlib import Path

import pytest

WC = "/app/wc.py"


def run(*args: str, stdin: bytes = b"", cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, WC, *args], input=stdin, capture_output=True, cwd=cwd, timeout=30
    )


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "poem.txt").write_bytes(b"roses are red\nviolets are blue\n")
    (tmp_path / "tail.txt").write_bytes(b"no newline\tat  the end")
    (tmp_path / "utf8.txt").write_bytes("h\u00e9llo w\u00f6rld\n".encode())
    (tmp_path / "empty.txt").write_bytes(b"")
    return tmp_path


def test_stdin_without_options_prints_all_three_counts():
    result = run(stdin=b"hello world\nfoo\n")
    assert result.returncode == 0
    assert result.stdout == b"2 3 16\n"


def test_empty_stdin():
    assert run().stdout == b"0 0 0\n"


def test_file_operand_is_named(files):
    result = run(str(files / "poem.txt"))
    assert result.returncode == 0
    assert result.stdout == f"2 6 31 {files / 'poem.txt'}\n".encode()


def test_operand_is_printed_as_given(files):
    result = run("poem.txt", cwd=files)
    assert result.stdout == b"2 6 31 poem.txt\n"


def test_last_line_without_newline_and_mixed_whitespace(files):
    assert run("-l", "tail.txt", cwd=files).stdout == b"0 tail.txt\n"
    assert run("-w", "tail.txt", cwd=files).stdout == b"5 tail.txt\n"


def test_bytes_are_counted_not_characters(files):
    assert run("-c", "utf8.txt", cwd=files).stdout == b"14 utf8.txt\n"
    assert run("-c", stdin=b"\xff\xfe\x00 x\n").stdout == b"6\n"


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["-l"], b"2\n"),
        (["-w"], b"6\n"),
        (["-c"], b"31\n"),
        (["-c", "-l"], b"2 31\n"),
        (["-cl"], b"2 31\n"),
        (["-wc"], b"6 31\n"),
        (["-cwl"], b"2 6 31\n"),
    ],
)
def test_options_select_counts_in_fixed_order(options, expected):
    result = run(*options, stdin=b"roses are red\nviolets are blue\n")
    assert result.returncode == 0
    assert result.stdout == expected


def test_several_files_end_with_a_total(files):
    result = run("-lw", "poem.txt", "tail.txt", "empty.txt", cwd=files)
    assert result.returncode == 0
    assert result.stdout == b"2 6 poem.txt\n0 5 tail.txt\n0 0 empty.txt\n2 11 total\n"


def test_dash_reads_stdin_among_files(files):
    result = run("-c", "poem.txt", "-", cwd=files, stdin=b"abc")
    assert result.stdout == b"31 poem.txt\n3 -\n34 total\n"


def test_missing_file_is_reported_and_the_rest_still_counted(files):
    result = run("-l", "poem.txt", "nope.txt", "tail.txt", cwd=files)
    assert result.returncode == 2
    assert result.stdout == b"2 poem.txt\n0 tail.txt\n2 total\n"
    assert result.stderr.decode().strip() == "wc.py: nope.txt: No such file or directory"


def test_single_missing_file(files):
    result = run("missing.txt", cwd=files)
    assert result.returncode == 2
    assert result.stdout == b""
    assert "wc.py: missing.txt: No such file or directory" in result.stderr.decode()


def test_unknown_option_is_a_usage_error():
    result = run("-x", stdin=b"a b c\n")
    assert result.returncode == 2
    assert result.stdout == b""
    assert b"usage:" in result.stderr.lower()


def test_large_input():
    data = b"lorem ipsum dolor\n" * 100_000
    assert run(stdin=data).stdout == f"100000 300000 {len(data)}\n".encode()
