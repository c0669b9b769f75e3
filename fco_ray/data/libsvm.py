"""LIBSVM / svmlight files as per-node sparse data (for E7 on real data).

A line is `label [qid:<id>] <index>:<value> ...` (scikit-learn's `load_svmlight_file`;
indices may be 0- or 1-based, detected from the file, and train/test files are read together
so they agree). Labels must be in {-1, +1} or {0, 1}. The node of every line comes from:

- `node_column="qid"` (default): the `qid:` field;
- `node_column=j` (int >= 0): column j of the loaded matrix (0-based; for a 1-based file,
  feature j + 1), which must hold integers and is removed from the features;
- `group_file=path`: a text file with one node id (any token) per training line.

Nodes are ordered by id; a node's lines keep their file order.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_files

from ..ops.random import generator
from ..runtime.errors import ConfigError
from ..runtime.files import read_text, readable_file
from .stores import SparseNodes, as_pm1

SPLIT_TAG = 0x5B17
MAX_GROUP_BYTES = 2**31  # a group file holds one short id per training line
#: largest accepted feature index + 1: a model is a dense length-d vector (16.8 M features
#: = 134 MB per float64 copy); a bigger index is far more likely a corrupted file
MAX_FEATURES = 1 << 24


def _check_file(path, what: str) -> str:
    """`path` if it is a readable regular file: a directory, a FIFO (never opened: reading
    one would block) or a device such as /dev/zero is an error naming what it is."""
    if not Path(path).exists():
        raise ValueError(f"{what}: LIBSVM file not found: {path}")
    try:
        return str(readable_file(path, f"{what} (LIBSVM file)"))
    except ConfigError as e:
        raise ValueError(str(e)) from None


def _data_lines(path: str):
    """(line number, bytes) of every data line of a LIBSVM file (scikit-learn's parser skips
    blank lines and '#' comments)."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            data = line.split(b"#", 1)[0].strip()
            if data:
                yield number, data


def _first_line(path: str, bad) -> int:
    """The number of the first data line for which `bad(tokens)` holds (-1 if none)."""
    return next((number for number, data in _data_lines(path) if bad(data.split())), -1)


def _too_large(tokens: list[bytes]) -> bool:
    """Whether a line holds a feature index >= 2^31 or a qid >= 2^63 (scikit-learn's parser
    raises OverflowError, without a file or line)."""
    for token in tokens[1:]:
        key, _, value = token.partition(b":")
        try:
            if (key == b"qid" and abs(int(value)) >= 2**63) or (key != b"qid" and int(key) >= 2**31):
                return True
        except ValueError:
            continue
    return False


def _malformed(tokens: list[bytes]) -> bool:
    """Whether a line is not `label [qid:<int>] <int index>:<float> ...` (what scikit-learn's
    parser reads)."""
    try:
        float(tokens[0])
        for token in tokens[1:]:
            key, colon, value = token.partition(b":")
            if not colon:
                return True
            int(value) if key == b"qid" else (int(key), float(value))
    except (ValueError, IndexError):
        return True
    return False


def _drop_column(x: sp.csr_matrix, column: int, path: str) -> tuple[sp.csr_matrix, np.ndarray]:
    if column >= x.shape[1]:
        raise ValueError(f"{path}: node_column {column} is out of range: the file has "
                         f"{x.shape[1]} columns (0..{x.shape[1] - 1})")
    ids = x[:, column].toarray().ravel()
    if not np.all(ids == np.round(ids)):
        bad = ids[ids != np.round(ids)][:3].tolist()
        raise ValueError(f"{path}: node_column {column} must hold integer node ids, got {bad}")
    keep = np.delete(np.arange(x.shape[1]), column)
    return sp.csr_matrix(x[:, keep]), ids.astype(np.int64)


def _line_of(path: str, row: int) -> int:
    """1-based line number of data row `row` of a LIBSVM file (scikit-learn's parser skips
    blank lines and '#' comments)."""
    seen = -1
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if line.split(b"#", 1)[0].strip():
                seen += 1
                if seen == row:
                    return number
    return -1


def _one_based(paths: list[str]) -> bool:
    """Whether scikit-learn read the files as 1-based: no file holds a feature index 0."""
    zero = re.compile(rb"(?:^|[ \t])0:")
    for path in paths:
        with open(path, "rb") as f:
            if any(zero.search(line.split(b"#", 1)[0]) for line in f):
                return False
    return True


def _check_values(paths: list[str], loaded: list) -> None:
    """Finite values and labels, and feature indices below MAX_FEATURES, in every file:
    a ValueError naming the file and line otherwise (before anything of size d is made)."""
    for path, x, y in zip(paths, loaded[0::3], loaded[1::3]):
        x = sp.csr_matrix(x)
        bad_rows = np.flatnonzero(~np.isfinite(y))
        if not np.all(np.isfinite(x.data)):
            entry = np.flatnonzero(~np.isfinite(x.data))[0]
            bad_rows = np.append(bad_rows, np.searchsorted(x.indptr, entry, side="right") - 1)
        if len(bad_rows):
            row = int(bad_rows.min())
            raise ValueError(f"{path}, line {_line_of(path, row)}: a label or feature value is not "
                             "a finite number (NaN or inf)")
        # a 1-based file (scikit-learn's "auto": no file holds index 0) whose largest index
        # is 2^24 fills exactly MAX_FEATURES columns: still an index of 2^24, out of range
        if x.shape[1] > MAX_FEATURES or (x.shape[1] == MAX_FEATURES and _one_based(paths)):
            one = _one_based(paths)
            big = np.flatnonzero(x.indices + one >= MAX_FEATURES)
            row = int(np.searchsorted(x.indptr, big[0], side="right") - 1) if len(big) else 0
            index = (int(x.indices[big[0]]) if len(big) else x.shape[1] - 1) + one
            raise ValueError(f"{path}, line {_line_of(path, row)}: feature index {index:,} is out "
                             f"of range: indices must be below 2^24 = {MAX_FEATURES:,} (the "
                             "model is a dense vector of that length)")


def read_libsvm(path, *, node_column: str | int | None = "qid", test_path=None):
    """Read a training file (and optionally a test file with the same features).

    Returns `(x, y, node_ids, test)` with `node_ids` None when `node_column` is None and
    `test` = (x, y) or None.
    """
    paths = [_check_file(path, "problem.path")]
    if test_path is not None:
        paths.append(_check_file(test_path, "problem.test_path"))
    try:
        loaded = load_svmlight_files(paths, dtype=np.float64, query_id=True)
    except OverflowError:
        for p in paths:
            line = _first_line(p, _too_large)
            if line > 0:
                raise ValueError(f"{p}, line {line}: a feature index >= 2^31 or a qid >= 2^63 "
                                 f"(at most {MAX_FEATURES:,} features are accepted)") from None
        raise ValueError(f"{' / '.join(paths)}: a number too large for a LIBSVM file") from None
    except ValueError as e:
        for p in paths:  # scikit-learn's parser names no line: find it
            line = _first_line(p, _malformed)
            if line > 0:
                raise ValueError(f"{p}, line {line}: not a valid LIBSVM line ({e}); a line is "
                                 "`label [qid:<integer>] <index>:<value> ...`") from None
        raise ValueError(f"{' / '.join(paths)}: not a valid LIBSVM file: {e}") from None
    x, y, qid = loaded[0], loaded[1], loaded[2]
    for p, rows in zip(paths, loaded[0::3]):
        if rows.shape[0] == 0:
            raise ValueError(f"{p}: no data lines (the file is empty or holds only comments)")
    _check_values(paths, loaded)
    try:
        y = as_pm1(y)
        test = None if test_path is None else [loaded[3], as_pm1(loaded[4])]
    except ValueError as e:
        raise ValueError(f"{' / '.join(paths)}: {e}") from None
    ids = None
    if node_column == "qid":
        if len(qid) == 0:
            raise ValueError(f"{path}: no 'qid:' fields; give problem.node_column (a feature "
                             f"column) or problem.group_file")
        if len(qid) != x.shape[0]:  # scikit-learn keeps only the qids given: no row of its own
            line = _first_line(paths[0], lambda tokens: len(tokens) < 2 or not tokens[1].startswith(b"qid:"))
            raise ValueError(f"{paths[0]}, line {line}: no 'qid:' field, while other lines have one "
                             f"({len(qid)} of {x.shape[0]} lines); every line needs its node")
        ids = np.asarray(qid, dtype=np.int64)
    elif isinstance(node_column, (int, np.integer)):
        x, ids = _drop_column(sp.csr_matrix(x), int(node_column), paths[0])
        if test is not None:
            test[0] = _drop_column(sp.csr_matrix(test[0]), int(node_column), paths[1])[0]
    elif node_column is not None:
        raise ValueError(f"node_column must be 'qid', a column index >= 0 or None, got {node_column!r}")
    return sp.csr_matrix(x), y, ids, None if test is None else tuple(test)


def read_groups(group_file, rows: int) -> np.ndarray:
    """One node id per line (blank lines are errors); the ids' count must equal `rows`."""
    path = _check_file(group_file, "problem.group_file")
    try:  # UTF-8 (an error names the line); split on newlines only: str.splitlines would
        # also split inside an id at a form feed, \x1c..\x1e or \u2028 and shift every later row
        text = read_text(path, "problem.group_file", max_bytes=MAX_GROUP_BYTES)
    except ConfigError as e:
        raise ValueError(str(e)) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    ids = np.array([line.rstrip("\r").strip(" \t") for line in lines])
    if len(ids) != rows:
        raise ValueError(f"{path}: {len(ids)} node ids for {rows} training lines; "
                         f"need exactly one id per line")
    if np.any(ids == ""):
        raise ValueError(f"{path}: line {int(np.argmax(ids == '')) + 1} is empty; need one node id per line")
    return ids


def group_by_node(x: sp.csr_matrix, y: np.ndarray, ids: np.ndarray) -> SparseNodes:
    """Rows reordered node by node (stable), node sizes = rows per distinct id."""
    order = np.argsort(ids, kind="stable")
    _, sizes = np.unique(ids[order], return_counts=True)
    return SparseNodes(x[order], y[order], sizes)


def split_holdout(nodes: SparseNodes, fraction: float, seed: int) -> tuple[SparseNodes, SparseNodes | None]:
    """Hold out floor(fraction n_k) random rows of every node (each keeps >= 1 training row);
    the held-out rows are pooled into one block (None if there are none)."""
    held = np.minimum(np.floor(fraction * nodes.sizes), nodes.sizes - 1).astype(np.int64)
    if held.sum() == 0:
        return nodes, None
    # a random rank of every row within its node: rows ranked below held[k] are held out
    key = generator(seed, SPLIT_TAG).random(nodes.x.shape[0])
    order = np.lexsort((key, nodes.node_of_row()))
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order)) - np.repeat(nodes.offsets[:-1], nodes.sizes)
    is_test = rank < np.repeat(held, nodes.sizes)
    train_rows, test_rows = np.flatnonzero(~is_test), np.flatnonzero(is_test)
    train = SparseNodes(nodes.x[train_rows], nodes.y[train_rows], nodes.sizes - held)
    return train, SparseNodes(nodes.x[test_rows], nodes.y[test_rows], [len(test_rows)])


def load_libsvm_problem_data(path, *, test_path=None, node_column: str | int = "qid",
                             group_file=None, test_fraction: float = 0.1,
                             seed: int = 0) -> tuple[SparseNodes, SparseNodes | None]:
    """(training nodes, pooled test block): the test file if given, else a per-node split."""
    x, y, ids, test = read_libsvm(path, node_column=None if group_file else node_column,
                                  test_path=test_path)
    if group_file is not None:
        ids = read_groups(group_file, x.shape[0])
    nodes = group_by_node(x, y, ids)
    if test is not None:
        return nodes, SparseNodes(test[0], test[1], [test[0].shape[0]])
    return split_holdout(nodes, test_fraction, seed)


__all__ = ["group_by_node", "load_libsvm_problem_data", "read_groups", "read_libsvm", "split_holdout"]
