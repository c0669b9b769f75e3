"""E7 data: the sparse problem's losses and gradients, the generator's properties, the
reshuffled twin, the LIBSVM loader, and clear errors on bad input."""
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression

import fco_ray
from fco_ray import ConfigError
from fco_ray.data.libsvm import load_libsvm_problem_data, split_holdout
from fco_ray.data.text_generator import (
    generate_text_nodes,
    power_law_sizes,
    reshuffle_nodes,
)
from fco_ray.ops.random import Key
from fco_ray.problems.text import (
    SparseNodes,
    SparseTextLogReg,
    logistic,
    margins,
    scatter_rows,
)

GEN = dict(clients=40, min_samples=10, max_samples=400, dim=400, words_per_doc=8, topics=5)


@pytest.fixture(scope="module")
def data():
    return generate_text_nodes(seed=3, **GEN)


@pytest.fixture(scope="module")
def problem(data):
    return SparseTextLogReg.from_nodes(*data)


# ---- losses and gradients --------------------------------------------------------------------
def numeric_grad(fun, w, eps=1e-6):
    out = np.zeros_like(w)
    for j in range(len(w)):
        e = np.zeros_like(w)
        e[j] = eps
        out[j] = (fun(w + e) - fun(w - e)) / (2 * eps)
    return out



def node_loss_grads(nodes: SparseNodes, w: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """F_k and grad F_k of every node at a shared w (d,) or its own w_k (C, d): (C,), (C, d)."""
    owner = nodes.node_of_row()
    loss, dloss = logistic(margins(nodes.x, w, owner), nodes.y)
    inv = 1.0 / nodes.sizes
    w_stack = np.broadcast_to(w, (nodes.num_clients, nodes.dim))
    values = np.bincount(owner, weights=loss, minlength=nodes.num_clients) * inv
    grads = scatter_rows(nodes.x, dloss * inv[owner], owner, nodes.num_clients) + lam * w_stack
    return values + 0.5 * lam * np.einsum("cd,cd->c", w_stack, w_stack), grads


def test_full_gradient_matches_finite_differences(problem):
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.5, problem.train.dim)
    idx = rng.choice(problem.train.dim, 25, replace=False)

    def f(v):
        return problem.full_loss_grad({"w": v})[0]

    g = problem.full_loss_grad({"w": w})[1]["w"]
    e = np.zeros_like(w)
    for j in idx:
        e[:] = 0
        e[j] = 1e-6
        assert abs((f(w + e) - f(w - e)) / 2e-6 - g[j]) < 1e-7
    # the value is the paper's f: sample mean of logistic losses plus lam/2 ||w||^2
    z = problem.train.x @ w
    want = np.mean(np.log1p(np.exp(-problem.train.y * z))) + 0.5 * problem.lam * w @ w
    assert abs(f(w) - want) < 1e-12


def test_stacked_minibatch_and_node_gradients_match_finite_differences(problem):
    rng = np.random.default_rng(1)
    rows = np.array([3, 0, 7])
    w = rng.normal(0, 0.5, (3, problem.train.dim))
    batch = problem.minibatch(rows, Key(0, 0, rows), batch_size=5)
    loss, grads = problem.loss_and_grad({"w": w}, batch)
    for c in range(3):
        single = {k: v[c:c + 1] for k, v in batch.items()}
        f = lambda v: problem.loss_and_grad({"w": v[None]}, single)[0][0]  # noqa: E731
        j = np.unique(problem.train.x[batch["sample"][c]].indices)[:6]
        num = numeric_grad(f, w[c])[j]
        np.testing.assert_allclose(grads["w"][c, j], num, rtol=1e-6, atol=1e-8)
    # full local batches give the nodes' F_k and grad F_k
    full = problem.minibatch(rows, Key(0, 0, rows), batch_size=None)
    loss_full, grads_full = problem.loss_and_grad({"w": w}, full)
    values, node_grads = node_loss_grads(problem.train.take(rows), w, problem.lam)
    np.testing.assert_allclose(loss_full, values, rtol=1e-12)
    np.testing.assert_allclose(grads_full["w"], node_grads, rtol=1e-10, atol=1e-14)
    # sample-weighted node mean = the full objective
    v_all, g_all = node_loss_grads(problem.train, w[0], problem.lam)
    share = problem.train.sizes / problem.train.sizes.sum()
    f0, g0 = problem.full_loss_grad({"w": w[0]})
    assert abs(share @ v_all - f0) < 1e-12
    np.testing.assert_allclose(share @ g_all, g0["w"], rtol=1e-10, atol=1e-14)


def test_optimum_matches_scikit_learn(problem):
    """lam = 1/n  <=>  scikit-learn's C = 1/(lam n) = 1, no intercept."""
    opt = problem.optimum
    n = problem.train.x.shape[0]
    ref = LogisticRegression(C=1.0 / (problem.lam * n), fit_intercept=False, tol=1e-12,
                             max_iter=10000).fit(problem.train.x, problem.train.y)
    np.testing.assert_allclose(opt.w, ref.coef_.ravel(), atol=1e-5)
    assert opt.grad_norm < 1e-8
    assert problem.full_loss_grad({"w": ref.coef_.ravel()})[0] >= opt.value - 1e-12
    m = problem.metrics({"w": opt.w})
    assert abs(m["suboptimality"]) < 1e-14 and m["test_error"] == opt.test_error
    assert abs(problem.lam - 1.0 / n) < 1e-18


def test_optimum_is_cached_on_disk_by_data(data, tmp_path, monkeypatch):
    monkeypatch.setenv("FCO_RAY_CACHE", str(tmp_path))
    first = SparseTextLogReg.from_nodes(*data).optimum
    assert first.iterations > 0 and len(list((tmp_path / "optima").glob("*.npy"))) == 1
    again = SparseTextLogReg.from_nodes(*data).optimum  # a new problem object: read, not solved
    assert again.iterations == 0 and again.value == first.value
    other = SparseTextLogReg.from_nodes(*data, lam=0.01).optimum  # other data or lam: solved
    assert other.iterations > 0 and len(list((tmp_path / "optima").glob("*.npy"))) == 2
    next((tmp_path / "optima").glob("*.npy")).write_bytes(b"garbage")
    for _ in range(2):
        assert SparseTextLogReg.from_nodes(*data).optimum.grad_norm < 1e-8
    monkeypatch.setenv("FCO_RAY_CACHE", "off")
    assert SparseTextLogReg.from_nodes(*data).optimum.iterations > 0


# ---- the generator and its twin -------------------------------------------------------------
def test_generator_has_the_e7_properties(data):
    train, test = data
    sizes = train.sizes
    assert sizes.min() >= GEN["min_samples"] and sizes.max() <= GEN["max_samples"]
    assert train.x.shape == (sizes.sum(), GEN["dim"]) and test.x.shape[1] == GEN["dim"]
    np.testing.assert_allclose(sp.linalg.norm(train.x, axis=1), 1.0)  # unit-norm rows
    assert set(np.unique(train.y)) == {-1.0, 1.0}
    # Zipf: the most frequent words dominate (rank-frequency falls like a power law)
    freq = np.sort(np.bincount(train.x.indices, minlength=GEN["dim"]))[::-1]
    slope = np.polyfit(np.log(np.arange(1, 51)), np.log(freq[:50]), 1)[0]
    assert -1.6 < slope < -0.4


def test_nodes_are_non_iid_and_the_twin_is_not():
    """Per-node topic skew and author label bias, measured on nodes big enough to see them:
    distance of a node's frequent-word distribution from the pooled one, spread of label rates."""
    train, _ = generate_text_nodes(seed=0, clients=20, min_samples=100, max_samples=400, dim=400,
                                   words_per_doc=8, topics=5)
    twin = reshuffle_nodes(train, 0)

    def spread(nodes, top=50):
        owner = nodes.node_of_row()
        tokens = sp.csr_matrix((np.ones(nodes.x.nnz), nodes.x.indices, nodes.x.indptr), shape=nodes.x.shape)
        per_node = (sp.csr_matrix((np.ones(len(owner)), (owner, np.arange(len(owner))))) @ tokens).toarray()
        counts = per_node[:, np.argsort(-per_node.sum(0))[:top]]
        dist = counts / counts.sum(1, keepdims=True)
        pooled = counts.sum(0) / counts.sum()
        label_rate = np.bincount(owner, weights=nodes.y > 0) / nodes.sizes
        return np.abs(dist - pooled).sum(1).mean(), np.std(label_rate)

    (words, labels), (words_r, labels_r) = spread(train), spread(twin)
    assert words > 2 * words_r and labels > 2 * labels_r


def test_power_law_sizes_span_the_range_with_a_heavy_tail():
    sizes = power_law_sizes(np.random.default_rng(0), 10000, 75, 9000, 1.5)
    assert sizes.min() == 75 and 5000 < sizes.max() <= 9000
    assert np.median(sizes) < 150 and sizes.mean() > 180  # most nodes small, a few huge


def test_generator_is_deterministic_and_seeded(data):
    again = generate_text_nodes(seed=3, **GEN)
    other = generate_text_nodes(seed=4, **GEN)
    assert (again[0].x != data[0].x).nnz == 0 and np.array_equal(again[0].y, data[0].y)
    assert other[0].x.shape != data[0].x.shape or (other[0].x != data[0].x).nnz > 0


def test_reshuffled_twin_keeps_sizes_and_samples(data):
    train = data[0]
    twin = reshuffle_nodes(train, 7)
    np.testing.assert_array_equal(twin.sizes, train.sizes)

    def rows(nodes):
        dense = nodes.x.toarray()
        return sorted(map(tuple, np.column_stack([dense, nodes.y]).round(12)))

    assert rows(twin) == rows(train)
    assert not np.array_equal(twin.y, train.y)


def test_config_builds_the_problem_and_its_twin():
    cfg = {"name": "sparse_text_logreg", **{k: GEN[k] for k in ("clients", "min_samples", "max_samples", "dim")}}
    df = fco_ray.run({"problem": cfg, "algorithm": {"name": "gd", "client_lr": 4.0}, "rounds": 2, "eval_every": 1})
    assert df.attrs["status"] == "finished" and df["suboptimality"].iloc[-1] < df["suboptimality"].iloc[0]
    twin = fco_ray.run({"problem": {**cfg, "reshuffle": True}, "algorithm": {"name": "gd", "client_lr": 4.0},
                        "rounds": 2, "eval_every": 1})
    # same pooled samples: the same objective at w = 0 and the same test set
    assert twin["train_loss"].iloc[0] == df["train_loss"].iloc[0]


# ---- SparseNodes ---------------------------------------------------------------------------
def test_take_and_subset_keep_rows_and_scalings(problem):
    rows = np.array([5, 2, 9])
    part = problem.train.take(rows)
    want = sp.vstack([problem.train.x[problem.train.offsets[k]:problem.train.offsets[k + 1]] for k in rows])
    assert (part.x != want).nnz == 0
    np.testing.assert_array_equal(part.sizes, problem.train.sizes[rows])
    shard = problem.subset(rows)
    assert shard.val is None and shard.num_clients == 3
    assert shard.total_samples == problem.total_samples and shard.lam == problem.lam
    node = np.repeat(part.node_of_row(), np.diff(part.x.indptr))
    full_node = np.repeat(problem.train.node_of_row(), np.diff(problem.train.x.indptr))
    for k, r in enumerate(rows):
        mine = part.scale[node == k]
        np.testing.assert_array_equal(mine, problem.train.scale[full_node == r])


def test_sparse_nodes_reject_bad_input():
    x = sp.random(6, 4, density=0.5, format="csr", random_state=0)
    with pytest.raises(ValueError, match="labels must be in"):
        SparseNodes(x, [1, 2, 1, 1, 1, 1], [6])
    with pytest.raises(ValueError, match="rows but sizes sum to 5"):
        SparseNodes(x, np.ones(6), [2, 3])
    with pytest.raises(ValueError, match="counts >= 1"):
        SparseNodes(x, np.ones(6), [6, 0])
    with pytest.raises(ValueError, match="scipy.sparse"):
        SparseNodes(x.toarray(), np.ones(6), [6])
    nodes = SparseNodes(x, [0, 1, 0, 1, 1, 0], [6])  # {0, 1} labels map to {-1, +1}
    assert set(nodes.y) == {-1.0, 1.0}
    with pytest.raises(ValueError, match="lam must be > 0"):
        SparseTextLogReg.from_nodes(nodes, lam=0.0)


def test_memory_is_proportional_to_nnz(data):
    arrays = data[0].arrays
    nnz, n = data[0].x.nnz, data[0].x.shape[0]
    held = sum(a.nbytes for a in arrays.values())
    assert held <= 12 * nnz + 16 * (n + 1)  # float64 values + int32 indices, O(n) extras


# ---- LIBSVM --------------------------------------------------------------------------------
LINES = ["1 qid:7 1:0.5 3:1.0", "0 qid:2 2:1.0", "1 qid:7 1:1.0 2:0.25", "0 qid:2 3:2.0",
         "1 qid:9 1:1.0", "0 qid:7 2:0.5 3:0.5"]


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_libsvm_loader_groups_by_qid(tmp_path):
    path = write(tmp_path, "train.svm", LINES)
    train, test = load_libsvm_problem_data(path, test_fraction=0.0)
    assert test is None
    np.testing.assert_array_equal(train.sizes, [2, 3, 1])  # qid 2, 7, 9
    np.testing.assert_array_equal(train.y, [-1, -1, 1, 1, -1, 1])
    dense = train.x.toarray()  # 1-based file -> columns 0..2, node 7 keeps its file order
    np.testing.assert_allclose(dense[2], [0.5, 0, 1.0])
    np.testing.assert_allclose(dense[3], [1.0, 0.25, 0])


def test_libsvm_loader_with_node_column_group_file_and_test_file(tmp_path):
    lines = [" ".join(part for part in line.split() if not part.startswith("qid"))
             for line in LINES]
    with_col = [f"{line} 4:{node}" for line, node in zip(lines, [1, 1, 2, 2, 3, 3])]
    path = write(tmp_path, "col.svm", with_col)
    test_path = write(tmp_path, "test.svm", ["1 1:1.0 4:5", "0 3:1.0 4:6"])
    train, test = load_libsvm_problem_data(path, test_path=test_path, node_column=3)
    np.testing.assert_array_equal(train.sizes, [2, 2, 2])
    assert train.dim == 3 and test.dim == 3 and test.x.shape[0] == 2  # column 3 removed
    groups = write(tmp_path, "groups.txt", ["alice", "bob", "alice", "carol", "bob", "alice"])
    plain = write(tmp_path, "plain.svm", lines)
    train, _ = load_libsvm_problem_data(plain, group_file=groups, test_fraction=0.0)
    np.testing.assert_array_equal(train.sizes, [3, 2, 1])


def test_libsvm_problem_through_the_config(tmp_path):
    rng = np.random.default_rng(0)
    lines = []
    for i in range(60):
        cols = np.sort(rng.choice(20, 4, replace=False)) + 1
        lines.append(f"{rng.integers(0, 2)} qid:{i % 5} " + " ".join(f"{c}:{rng.random():.3f}" for c in cols))
    path = write(tmp_path, "data.svm", lines)
    df = fco_ray.run({"problem": {"name": "sparse_text_logreg", "dataset": "libsvm", "path": path,
                                  "test_fraction": 0.2},
                      "algorithm": {"name": "fsvrg", "client_lr": 5.0}, "rounds": 3, "eval_every": 1})
    assert df.attrs["status"] == "finished"
    assert df["suboptimality"].iloc[-1] < df["suboptimality"].iloc[0]
    assert df["test_error"].notna().all()


def test_split_holdout_keeps_every_node_and_is_seeded(data):
    train, test = split_holdout(data[0], 0.25, seed=0)
    np.testing.assert_array_equal(train.sizes, data[0].sizes - np.floor(0.25 * data[0].sizes))
    assert test.x.shape[0] + train.x.shape[0] == data[0].x.shape[0]
    again, _ = split_holdout(data[0], 0.25, seed=0)
    assert (again.x != train.x).nnz == 0


@pytest.mark.parametrize("lines,kwargs,match", [
    (["2 qid:1 1:1", "1 qid:1 2:1"], {}, r"labels must be in \{-1, \+1\} or \{0, 1\}, got values \[1.0, 2.0\]"),
    (["1 1:1", "0 2:1"], {}, "no 'qid:' fields"),
    (["1 1:1 2:0.5", "0 2:1"], {"node_column": 1}, "must hold integer node ids"),
    (["1 1:1", "0 2:1"], {"node_column": 9}, "node_column 9 is out of range"),
    (["1 qid:1 1:1", "oops"], {}, r"line 2: not a valid LIBSVM line"),
])
def test_libsvm_bad_input_is_explained(tmp_path, lines, kwargs, match):
    path = write(tmp_path, "bad.svm", lines)
    with pytest.raises(ValueError, match=match):
        load_libsvm_problem_data(path, **kwargs)


def test_libsvm_missing_files_and_bad_groups(tmp_path):
    with pytest.raises(ValueError, match="LIBSVM file not found"):
        load_libsvm_problem_data(str(tmp_path / "nope.svm"))
    path = write(tmp_path, "ok.svm", ["1 1:1", "0 2:1", "1 1:2"])
    groups = write(tmp_path, "g.txt", ["a", "b"])
    with pytest.raises(ValueError, match="2 node ids for 3 training lines"):
        load_libsvm_problem_data(path, group_file=groups)


@pytest.mark.parametrize("problem_cfg,match", [
    ({"dataset": "libsvm"}, "problem.path is required"),
    ({"path": "x.svm"}, "only used with problem.dataset = 'libsvm'"),
    ({"min_samples": 50, "max_samples": 10}, "min_samples"),
    ({"node_column": "author"}, "node_column must be 'qid'"),
    ({"lam": -1.0}, "problem.lam"),
    ({"dataset": "libsvm", "path": "/nonexistent/file.svm"}, "LIBSVM file not found"),
])
def test_problem_config_errors_name_the_key(problem_cfg, match):
    with pytest.raises(ConfigError, match=match):
        fco_ray.run({"problem": {"name": "sparse_text_logreg", **problem_cfg},
                     "algorithm": {"name": "gd"}, "rounds": 1})


# ---- reliability: bad data is a load error, a cached optimum is verified ------------------------
@pytest.mark.parametrize("lines,match", [
    (["1 qid:1 1:0.5", "0 qid:1 2:nan"], r"bad\.svm, line 2: .*not a finite number"),
    (["1 qid:1 1:0.5", "# a comment", "", "0 qid:2 2:inf 3:1"], r"bad\.svm, line 4: .*not a finite number"),
    (["1 qid:1 1:0.5", "nan qid:1 2:1"], r"bad\.svm, line 2: .*not a finite number"),
    (["1 qid:1 1:0.5", "0 qid:2 2000000000:1"], r"bad\.svm, line 2: feature index 2,000,000,000 "
                                                 r"is out of range: indices must be below 2\^24"),
])
def test_libsvm_non_finite_values_and_huge_indices_are_load_errors(tmp_path, lines, match):
    path = write(tmp_path, "bad.svm", lines)
    with pytest.raises(ValueError, match=match):
        load_libsvm_problem_data(path, test_fraction=0.0)
    with pytest.raises(ConfigError, match=match):  # CLI: exit 2, never a "diverged" run
        fco_ray.run({"problem": {"name": "sparse_text_logreg", "dataset": "libsvm", "path": path},
                     "algorithm": {"name": "gd"}, "rounds": 1})


def test_a_wrong_cached_optimum_is_detected_and_solved_again(data, tmp_path, monkeypatch):
    """A finite but wrong w* in the cache (stale file, another problem's solution) is not
    trusted: its gradient norm is checked, a warning is raised and w* is solved again."""
    from fco_ray.problems.text import OPTIMUM_GRAD_TOL, data_fingerprint

    monkeypatch.setenv("FCO_RAY_CACHE", str(tmp_path))
    problem = SparseTextLogReg.from_nodes(*data)
    path = tmp_path / "optima" / f"{data_fingerprint(problem.train, problem.lam)}.npy"
    path.parent.mkdir(parents=True)
    planted = np.full(problem.train.dim, 0.01)
    np.save(path, planted)
    with pytest.warns(RuntimeWarning, match=r"cached optimum .* has \|\|grad f\|\| = .* solving again"):
        opt = problem.optimum
    assert opt.iterations > 0 and opt.grad_norm <= OPTIMUM_GRAD_TOL
    assert not np.allclose(opt.w, planted)
    np.testing.assert_array_equal(np.load(path), opt.w)  # the verified solution replaced it
    again = SparseTextLogReg.from_nodes(*data).optimum
    assert again.iterations == 0 and again.value == opt.value


def test_data_stores_and_loaders_do_not_import_problems():
    """data/ sits below problems/: no import circle (stores, loaders import no problem)."""
    import ast
    from pathlib import Path

    for path in (Path(fco_ray.__file__).parent / "data").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):  # also imports inside functions
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [a.name for a in node.names]
                assert not any("problems" in n for n in names), (path.name, ast.unparse(node))
            elif isinstance(node, ast.Import):
                assert not any("problems" in a.name for a in node.names), (path.name, ast.unparse(node))
    from fco_ray import ClientData as top
    from fco_ray.data.stores import ClientData
    from fco_ray.data.stores import SparseNodes as stored
    from fco_ray.problems.base import ClientData as old

    assert top is ClientData is old and SparseNodes is stored


def test_stores_share_one_protocol(data):
    dense = fco_ray.ClientData.from_lists([{"x": np.ones((n, 3)), "y": np.zeros(n)} for n in (2, 5)])
    for store in (dense, data[0]):
        part = store.take([1, 0])
        assert part.num_clients == 2 and list(part.sizes) == [store.sizes[1], store.sizes[0]]
        assert store.max_samples == store.sizes.max() and store.bytes_per_sample > 0
    assert dense.bytes_per_sample == 3 * 8 + 8
