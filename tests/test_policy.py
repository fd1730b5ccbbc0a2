"""writer/policy.py's `choose_rewrites`, without Spark or a table: Iceberg's bin-packing rules
(SizeBasedFileRewritePlanner's defaults) on files described by their sizes and deletes."""

from __future__ import annotations

import pytest

from mor.writer.policy import Candidate, RewriteGroup, Thresholds, choose_rewrites, output_files

pytestmark = pytest.mark.check
MB = 1 << 20
T = Thresholds(target=100 * MB)


def _files(part: str, *sizes: int, deletes: int = 0, known: int = 0) -> list[Candidate]:
    return [
        Candidate(f"{part}/{i}.parquet", part, s * MB, 1000, deletes, known)
        for i, s in enumerate(sizes)
    ]


def test_files_of_the_target_size_without_deletes_stay() -> None:
    assert choose_rewrites(_files("a", 80, 100, 179), T) == []


def test_small_files_of_one_partition_are_packed_when_enough_of_them() -> None:
    # four small files make less than one target: below min_input_files, left
    assert choose_rewrites(_files("a", 10, 10, 10, 10), T) == []
    # five: rewritten into one file
    (g,) = choose_rewrites(_files("a", 10, 10, 10, 10, 10), T)
    assert g == RewriteGroup(tuple(f"a/{i}.parquet" for i in range(5)), 1)
    # two small files making more than one target: rewritten; 140 MB is one file (the 40 MB
    # remainder is under 75% of the target), 210 MB two
    (g,) = choose_rewrites(_files("b", 70, 70), T)
    assert g.files == 1 and len(g.paths) == 2
    (g,) = choose_rewrites(_files("b", 70, 70, 70), T)
    assert g.files == 2


def test_partitions_are_grouped_apart() -> None:
    groups = choose_rewrites(_files("a", *[10] * 5) + _files("b", 10, 10), T)
    assert [g.paths[0].split("/")[0] for g in groups] == ["a"]


def test_one_large_file_is_split() -> None:
    (g,) = choose_rewrites(_files("a", 250), T)
    assert g.files == 2  # 250 MB: two of 100 and a remainder of 50 (under 75): two files


def test_a_file_deletes_weigh_on_is_rewritten_alone() -> None:
    # 40% of its rows deleted by file-scoped position deletes: over the 0.3 ratio
    heavy = _files("a", 100, deletes=1, known=400)
    (g,) = choose_rewrites(heavy, T)
    assert g.paths == ("a/0.parquet",) and g.files == 1
    # 20%: under the ratio, a file of the right size stays ...
    assert choose_rewrites(_files("a", 100, deletes=1, known=200), T) == []
    # ... unless the delete-file threshold is met
    assert choose_rewrites(
        _files("a", 100, deletes=2, known=0), Thresholds(100 * MB, delete_files=2)
    )
    # a heavy file takes the small files of its partition with it
    (g,) = choose_rewrites(heavy + _files("a", 10), T)
    assert len(g.paths) == 2


def test_output_files_count_the_live_bytes() -> None:
    # 3 x 90 MB files with 60% deleted: 108 MB live -> one file (8 MB remainder is no file)
    files = [Candidate(f"a/{i}", "a", 90 * MB, 1000, 1, 600) for i in range(3)]
    (g,) = choose_rewrites(files, T)
    assert g.files == 1
    assert output_files(0, 100) == 1 and output_files(174, 100) == 1 and output_files(176, 100) == 2


@pytest.mark.parametrize(
    "kw, what",
    [
        ({"target": 0}, "--target-file-size"),
        ({"delete_ratio": 0}, "--delete-ratio-threshold"),
        ({"delete_ratio": 1.5}, "--delete-ratio-threshold"),
        ({"delete_files": 0}, "--delete-file-threshold"),
        ({"min_input_files": 0}, "--min-input-files"),
    ],
)
def test_thresholds_out_of_range_are_refused(kw: dict, what: str) -> None:
    with pytest.raises(ValueError, match=what):
        Thresholds(**kw)
