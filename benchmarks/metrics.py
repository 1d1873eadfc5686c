"""Wall time of the full metric suite for one model on 10k samples: probe vs a straightforward
sequential re-implementation (disentanglement_lib's structure: every metric draws and encodes its own
samples in batches of 16/64, sklearn called per pair / per factor, one job), in the same run, at equal
seeds. Prints both times, the per-metric breakdown, the largest difference between the two results
and the ratio.

    python benchmarks/metrics.py [--factor-sizes 3,4,5,6,8] [--resolution 16] [--num-train 10000]

The model is probe's MLP encoder (hidden 256, 10 latents, float64, random init, posterior mean as the code)
on a generated dSprites-like store: the speed of a metric does not depend on the model being trained.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

import numpy as np


def build_store(path, sizes, resolution):
    from probe.data.synth import generate

    return generate("dsprites", path, resolution=resolution, factor_sizes=sizes, seed=0, progress=False)


def build_encoder(image_shape_hwc, seed=0, chunk=64):
    """MLP encoder (float64) run on fixed-size chunks of ``chunk`` rows (the last one zero-padded).

    Matrix kernels round differently for different batch shapes; a fixed chunk shape makes every
    image's code bit-identical however the caller batches, so probe (large batches) and the reference
    (batches of 16 / 64) see the same codes and their metric values can be compared exactly.
    """
    import torch

    from probe.models.nets.locatello import MLPEncoder

    torch.manual_seed(seed)
    h, w, c = image_shape_hwc
    net = MLPEncoder((c, h, w), 10, gaussian=True, hidden=256).double().eval()

    @torch.no_grad()
    def encode(images):  # uint8 [n, H, W, C] -> mean codes [n, 10] (float64)
        n = images.shape[0]
        pad = (-n) % chunk
        x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).double() / 255.0
        if pad:
            x = torch.cat([x, x.new_zeros((pad, *x.shape[1:]))])
        out = [net(x[i:i + chunk])[0] for i in range(0, x.shape[0], chunk)]
        return torch.cat(out)[:n].numpy()

    return encode


# -- the sequential reference --------------------------------------------------------------------------

def reference_suite(images, store, encode, seed, s):
    """disentanglement_lib-style: each metric its own RandomState(seed), batches of 16 / 64, sklearn per pair."""
    from scipy.stats import entropy as sp_entropy
    from sklearn.ensemble import GradientBoostingClassifier
    from sklearn.feature_selection import mutual_info_classif
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss, mutual_info_score, roc_auc_score
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    from probe.metrics._common import unpenalised_logistic_regression

    sizes = np.asarray(store.factor_sizes)
    K = sizes.size

    def sample_factors(n, rng):
        return np.stack([rng.randint(sz, size=n) for sz in sizes], axis=1)

    def codes_of(f):
        return encode(images[store.index_of(f)])

    def batch_codes(n, rng, bs=16):
        fs, cs = [], []
        done = 0
        while done < n:
            m = min(bs, n - done)
            f = sample_factors(m, rng)
            fs.append(f)
            cs.append(codes_of(f))
            done += m
        return np.concatenate(cs), np.concatenate(fs)

    def discretize(c):
        return np.stack([np.digitize(c[:, j], np.histogram(c[:, j], 20)[1][:-1]) for j in range(c.shape[1])], 1)

    def mi_matrix(a, f):
        return np.array([[mutual_info_score(f[:, j], a[:, i]) for j in range(f.shape[1])] for i in range(a.shape[1])])

    out, times = {}, {}

    def timed(name, fn):
        t = time.perf_counter()
        out[name] = fn()
        times[name] = time.perf_counter() - t

    def mig():
        c, f = batch_codes(s["num_train"], np.random.RandomState(seed))
        m = mi_matrix(discretize(c), f)
        h = np.array([mutual_info_score(f[:, j], f[:, j]) for j in range(K)])
        srt = np.sort(m, axis=0)[::-1]
        return {"mig": float(np.mean((srt[0] - srt[1]) / h))}

    def dci():
        rng = np.random.RandomState(seed)
        c, f = batch_codes(s["num_train"], rng)
        ct, ft = batch_codes(s["num_test"], rng)
        r = np.zeros((c.shape[1], K))
        tr, te = [], []
        for j in range(K):
            model = GradientBoostingClassifier(random_state=seed).fit(c, f[:, j])
            r[:, j] = np.abs(model.feature_importances_)
            tr.append(np.mean(model.predict(c) == f[:, j]))
            te.append(np.mean(model.predict(ct) == ft[:, j]))
        d = np.sum((1 - sp_entropy(r.T + 1e-11, base=K)) * r.sum(1) / r.sum())
        cc = np.sum((1 - sp_entropy(r + 1e-11, base=r.shape[0])) * r.sum(0) / r.sum())
        return {"disentanglement": float(d), "completeness": float(cc), "informativeness_train": float(np.mean(tr)),
                "informativeness_test": float(np.mean(te))}

    def sap():
        rng = np.random.RandomState(seed)
        c, f = batch_codes(s["num_train"], rng)
        ct, ft = batch_codes(s["num_test"], rng)
        score = np.zeros((c.shape[1], K))
        for i in range(c.shape[1]):
            for j in range(K):
                m = LinearSVC(C=0.01, class_weight="balanced", dual=False, random_state=seed).fit(c[:, i:i + 1], f[:, j])
                score[i, j] = np.mean(m.predict(ct[:, i:i + 1]) == ft[:, j])
        srt = np.sort(score, axis=0)
        return {"sap": float(np.mean(srt[-1] - srt[-2]))}

    def modularity():
        rng = np.random.RandomState(seed)
        c, f = batch_codes(s["num_train"], rng)
        ct, ft = batch_codes(s["num_test"], rng)
        sq = mi_matrix(discretize(c), f) ** 2
        mx = sq.max(1)
        mod = 1 - (sq.sum(1) - mx) / (mx * (K - 1))
        mod[mx == 0] = 0
        mu, sd = c.mean(0), c.std(0)
        xtr, xte = (c - mu) / sd, (ct - mu) / sd
        etr, ete = [], []
        for j in range(K):
            m = LogisticRegression().fit(xtr, f[:, j])
            oh = lambda y: (y[:, None] == m.classes_[None, :]).astype(int)
            etr.append(roc_auc_score(oh(f[:, j]), m.predict_proba(xtr)))
            ete.append(roc_auc_score(oh(ft[:, j]), m.predict_proba(xte)))
        return {"modularity": float(np.mean(mod)), "explicitness_train": float(np.mean(etr)),
                "explicitness_test": float(np.mean(ete))}

    def infomec():
        c, f = batch_codes(s["num_train"], np.random.RandomState(seed))
        z = StandardScaler().fit_transform(c)
        rng = np.random.RandomState(seed)
        nmi = np.zeros((K, c.shape[1]))
        for i in range(K):
            h = mutual_info_score(f[:, i], f[:, i])
            for j in range(c.shape[1]):
                nmi[i, j] = mutual_info_classif(z[:, j:j + 1], f[:, i], n_neighbors=3, random_state=rng)[0] / h
        spread = c.max(0) - c.min(0)
        act = spread > spread.max() / 20
        n = nmi[:, act]
        im = (np.mean(n.max(0) / n.sum(0)) - 1 / K) / (1 - 1 / K)
        ic = (np.mean(n.max(1) / n.sum(1)) - 1 / n.shape[1]) / (1 - 1 / n.shape[1])
        x = StandardScaler().fit_transform(c)
        es = []
        for i in range(K):
            def ll(features):
                m = unpenalised_logistic_regression(solver="lbfgs", max_iter=100, tol=1e-4, class_weight="balanced",
                                                    random_state=seed).fit(features, f[:, i])
                return log_loss(f[:, i], m.predict_proba(features), labels=m.classes_)
            h0 = ll(np.zeros_like(x))
            es.append((h0 - ll(x)) / h0)
        return {"infom": float(im), "infoe": float(np.mean(es)), "infoc": float(ic)}

    def factor_vae():
        rng = np.random.RandomState(seed)
        c, _ = batch_codes(s["fv_var"], rng, bs=s["fv_var"])
        gv = np.var(c, axis=0, ddof=1)
        act = np.sqrt(gv) >= 0.05

        def votes(n):
            v = np.zeros((K, int(act.sum())), dtype=np.int64)
            for _ in range(n):
                k = rng.randint(K)
                fb = sample_factors(64, rng)
                fb[:, k] = fb[0, k]
                lv = np.var(codes_of(fb), axis=0, ddof=1)
                v[k, np.argmin(lv[act] / gv[act])] += 1
            return v

        vt = votes(s["fv_train"])
        ve = votes(s["fv_eval"])
        cl = np.argmax(vt, 0)
        cols = np.arange(vt.shape[1])
        return {"train_accuracy": float(vt[cl, cols].sum() / vt.sum()),
                "eval_accuracy": float(ve[cl, cols].sum() / ve.sum()), "num_active_dims": float(act.sum())}

    def beta_vae():
        rng = np.random.RandomState(seed)

        def points(n):
            xs, ys = [], []
            for _ in range(n):
                k = rng.randint(K)
                f1 = sample_factors(64, rng)
                f2 = sample_factors(64, rng)
                f2[:, k] = f1[:, k]
                xs.append(np.mean(np.abs(codes_of(f1) - codes_of(f2)), axis=0))
                ys.append(k)
            return np.array(xs), np.array(ys)

        x, y = points(s["bv_train"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = LogisticRegression(random_state=rng).fit(x, y)
        xe, ye = points(s["bv_eval"])
        return {"train_accuracy": float(np.mean(m.predict(x) == y)), "eval_accuracy": float(np.mean(m.predict(xe) == ye))}

    def tc():
        c, _ = batch_codes(s["num_train"], np.random.RandomState(seed))
        cov = np.cov(c, rowvar=False)
        return {"gaussian_tc": float(0.5 * (np.sum(np.log(np.diag(cov))) - np.linalg.slogdet(cov)[1]))}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, fn in [("mig", mig), ("dci", dci), ("sap", sap), ("modularity_explicitness", modularity),
                         ("infomec", infomec), ("factor_vae_score", factor_vae), ("beta_vae_score", beta_vae),
                         ("gaussian_tc", tc)]:
            timed(name, fn)
    return out, times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--factor-sizes", default="3,4,5,6,8")
    p.add_argument("--resolution", type=int, default=16)
    p.add_argument("--num-train", type=int, default=10000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    from probe.metrics import Encoder, evaluate_encoder

    sizes = [int(x) for x in args.factor_sizes.split(",")]
    metrics = ["mig", "dci", "sap", "modularity_explicitness", "infomec", "factor_vae_score", "beta_vae_score",
               "gaussian_tc"]
    s = {"num_train": args.num_train, "num_test": args.num_train // 2, "fv_var": args.num_train,
         "fv_train": args.num_train, "fv_eval": args.num_train // 2, "bv_train": args.num_train,
         "bv_eval": args.num_train // 2}
    settings = {"num_train": s["num_train"], "num_test": s["num_test"], "factor_vae_num_variance_estimate": s["fv_var"],
                "factor_vae_num_train": s["fv_train"], "factor_vae_num_eval": s["fv_eval"],
                "beta_vae_num_train": s["bv_train"], "beta_vae_num_eval": s["bv_eval"]}
    with tempfile.TemporaryDirectory() as tmp:
        store = build_store(os.path.join(tmp, "bench.zarr"), sizes, args.resolution)
        images = store.load_numpy()
        encode = build_encoder(store.image_shape, args.seed)

        class InMemory:  # both implementations read images from memory
            def __init__(self, s):
                self.__dict__.update({k: getattr(s, k) for k in ("factor_sizes", "num_images", "digest", "name", "path")})
                self.index_of = s.index_of

            def read(self, idx):
                return images[idx]

        mem = InMemory(store)
        print(f"store: dsprites-like {sizes} ({store.num_images} images, {args.resolution}px); model: MLP encoder; "
              f"num_train={args.num_train}; cpus={os.cpu_count()}; python {sys.version.split()[0]}", flush=True)
        t0 = time.perf_counter()
        probe_out = evaluate_encoder(mem, Encoder(encode), metrics=metrics, seed=args.seed, settings=settings)
        t_probe = time.perf_counter() - t0
        print(f"probe:     {t_probe:8.1f} s  {probe_out['settings']['timings_s']}  "
              f"(encoded {probe_out['settings']['images_encoded']} images)", flush=True)
        t0 = time.perf_counter()
        ref_out, ref_times = reference_suite(images, store, encode, args.seed, s)
        t_ref = time.perf_counter() - t0
        print(f"reference: {t_ref:8.1f} s  { {k: round(v, 2) for k, v in ref_times.items()} }", flush=True)
    worst = 0.0
    for name, ref in ref_out.items():
        for key, value in ref.items():
            got = probe_out["metrics"][name][key]
            diff = abs(got - value)
            worst = max(worst, diff)
            flag = "" if diff <= 1e-9 else "  <-- DIFFERS"
            print(f"  {name}.{key}: probe {got:.12g} reference {value:.12g}{flag}")
    print(f"max |probe - reference| = {worst:.3g} ({'identical' if worst <= 1e-9 else 'NOT identical'})")
    print(f"speed-up: {t_ref / t_probe:.2f}x")
    return 0 if worst <= 1e-9 else 1


if __name__ == "__main__":
    sys.exit(main())
