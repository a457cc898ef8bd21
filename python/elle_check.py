#!/usr/bin/env python3
"""An independent checker for histories in Elle's JSON forms (list-append, rw-register).

Written for txbed's Elle exports when Elle itself (Clojure) cannot run: it reads only the Elle
file, knows nothing of txbed's format, and infers everything as Elle does from what the
operations observed:

- list-append: each key's version order is its longest read; every other read must be a
  prefix of it (else "incompatible-order"); a value twice in a read is "duplicate-elements".
- rw-register: versions are the values written; the order is not known, so only wr edges and
  aborted/intermediate reads are inferred (Elle infers more with extra assumptions).
- G1a: an ok read observed a value a failed operation wrote. G1b: an ok read ends at a value
  its writer overwrote later in the same operation.
- Dependency edges between ok operations: ww (consecutive versions), wr (read a version), rw
  (read a version, another installed the next), and with --realtime, real-time edges (an op
  completed before another was invoked). Every strongly connected component is named by its
  most severe cycle: G0 (ww only), G1c (ww, wr), G-single (one rw), G2-item (two or more rw), and
  G-realtime when real-time edges are needed.

Usage: elle_check.py [--model list-append|rw-register] [--realtime] HISTORY.json
Prints a JSON verdict {"valid": ..., "anomaly-types": [...], "anomalies": {...}} and exits 0
(valid), 1 (anomalies) or 2 (unreadable input).
"""

import argparse
import bisect
import json
import sys
from collections import defaultdict, deque


def fail_input(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def load(path):
    try:
        with open(path) as f:
            ops = json.load(f)
    except (OSError, ValueError) as e:
        fail_input(f"{path}: {e}")
    if not isinstance(ops, list):
        fail_input(f"{path}: expected a JSON array of operations")
    return ops


def pair(ops):
    """Completed transactions: (invoke position, completion position, type, value)."""
    open_by_process = {}
    done = []
    for pos, op in enumerate(ops):
        if not isinstance(op, dict) or "type" not in op or "process" not in op:
            fail_input(f"operation {pos} is not an object with type and process")
        p, t = op["process"], op["type"]
        if t == "invoke":
            if p in open_by_process:
                fail_input(f"process {p} invokes at {pos} before its op at {open_by_process[p]} completed")
            open_by_process[p] = pos
        elif t in ("ok", "fail", "info"):
            if p not in open_by_process:
                fail_input(f"operation {pos}: process {p} completes an op it never invoked")
            done.append((open_by_process.pop(p), pos, t, op.get("value") or []))
        else:
            fail_input(f"operation {pos}: unknown type {t!r}")
    return done


def check(ops, model, realtime):
    txns = pair(ops)
    anomalies = defaultdict(list)
    ok = [i for i, t in enumerate(txns) if t[2] == "ok"]
    # Who wrote each (key, value), and each op's writes per key in order.
    writer, failed_write, own_writes = {}, {}, defaultdict(list)
    write_op = "append" if model == "list-append" else "w"
    for i, (_, _, typ, value) in enumerate(txns):
        for mop in value:
            if mop[0] == write_op:
                k, v = mop[1], mop[2]
                if typ == "ok":
                    writer[(k, v)] = i
                    own_writes[(i, k)].append(v)
                elif typ == "fail":
                    failed_write[(k, v)] = i
    # Reads of ok ops: (op, key, observed).
    reads = [(i, mop[1], mop[2]) for i in ok for mop in txns[i][3] if mop[0] == "r"]
    edges = defaultdict(set)  # (a, b) -> kinds

    def add(a, b, kind):
        if a != b:
            edges[(a, b)].add(kind)

    def last_seen(obs):
        if model == "list-append":
            return obs[-1] if obs else None
        return obs

    for i, k, obs in reads:
        if model == "list-append" and not isinstance(obs, list):
            continue
        seen = obs if model == "list-append" else ([] if obs is None else [obs])
        for v in seen:
            if (k, v) in failed_write and (k, v) not in writer:
                anomalies["G1a"].append({"op": i, "key": k, "value": v, "writer": failed_write[(k, v)]})
        last = last_seen(obs)
        if last is not None and (k, last) in writer:
            w = writer[(k, last)]
            mine = own_writes[(w, k)]
            if w != i and mine and mine[-1] != last:
                anomalies["G1b"].append({"op": i, "key": k, "value": last, "writer": w})
    if model == "list-append":
        longest = {}
        for i, k, obs in reads:
            if not isinstance(obs, list):
                continue
            if len(set(obs)) != len(obs):
                anomalies["duplicate-elements"].append({"op": i, "key": k, "read": obs})
            if len(obs) > len(longest.get(k, [])):
                longest[k] = obs
        for i, k, obs in reads:
            if isinstance(obs, list) and longest.get(k, [])[: len(obs)] != obs:
                anomalies["incompatible-order"].append({"op": i, "key": k, "read": obs, "longest": longest[k]})
        # Versions per key; only values some ok op appended are ordered (others are failed
        # or unknown writes, reported above).
        for k, order in longest.items():
            for a, b in zip(order, order[1:]):
                if (k, a) in writer and (k, b) in writer:
                    add(writer[(k, a)], writer[(k, b)], "ww")
        for i, k, obs in reads:
            if not isinstance(obs, list):
                continue
            order = longest.get(k, [])
            if obs and (k, obs[-1]) in writer:
                add(writer[(k, obs[-1])], i, "wr")
            # The next version after what was read, skipping the reader's own appends.
            for v in order[len(obs):]:
                w = writer.get((k, v))
                if w is not None and w != i:
                    add(i, w, "rw")
                    break
    else:
        for i, k, obs in reads:
            if obs is not None and (k, obs) in writer:
                add(writer[(k, obs)], i, "wr")

    nodes = list(ok)
    adj = defaultdict(list)
    for (a, b), kinds in edges.items():
        adj[a].append((b, kinds))
    if realtime:
        # Real time (A completed before B was invoked) through a chain of completion points:
        # A -> its completion -> every later completion -> each B invoked after it.
        points = sorted(txns[i][1] for i in ok)
        for x, y in zip(points, points[1:]):
            adj[("pt", x)].append((("pt", y), {"rt"}))
        for i in ok:
            adj[i].append((("pt", txns[i][1]), {"rt"}))
            j = bisect.bisect_left(points, txns[i][0]) - 1
            if j >= 0:
                adj[("pt", points[j])].append((i, {"rt"}))
        nodes = nodes + [("pt", x) for x in points]
    for comp_nodes in sccs(nodes, adj):
        members = [u for u in comp_nodes if isinstance(u, int)]
        if len(members) < 2:
            continue
        inside = set(comp_nodes)
        anomalies[classify(members, inside, adj)].append({"ops": sorted(members)})
    return anomalies


def sccs(nodes, adj):
    """Tarjan, iterative."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(adj[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            u, it = work[-1]
            advanced = False
            for v, _ in it:
                if v not in index:
                    index[v] = low[v] = counter
                    counter += 1
                    stack.append(v)
                    on.add(v)
                    work.append((v, iter(adj[v])))
                    advanced = True
                    break
                if v in on:
                    low[u] = min(low[u], index[v])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[u])
            if low[u] == index[u]:
                c = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    c.append(w)
                    if w == u:
                        break
                out.append(c)
    return out


def reaches(src, dst, inside, adj, allowed):
    seen, q = {src}, deque([src])
    while q:
        u = q.popleft()
        if u == dst:
            return True
        for v, kinds in adj[u]:
            if v in inside and v not in seen and kinds & allowed:
                seen.add(v)
                q.append(v)
    return False


def classify(members, inside, adj):
    txn_inside = {u for u in inside if isinstance(u, int)}
    for name, allowed in (("G0", {"ww"}), ("G1c", {"ww", "wr"})):
        for u in members:
            for v, kinds in adj[u]:
                if v in txn_inside and kinds & allowed and reaches(v, u, txn_inside, adj, allowed):
                    return name
    for u in members:
        for v, kinds in adj[u]:
            if v in txn_inside and "rw" in kinds and reaches(v, u, txn_inside, adj, {"ww", "wr"}):
                return "G-single"
    for u in members:
        for v, kinds in adj[u]:
            if v in txn_inside and kinds - {"rt"} and reaches(v, u, txn_inside, adj, {"ww", "wr", "rw"}):
                return "G2-item"
    return "G-realtime"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("history")
    ap.add_argument("--model", choices=["list-append", "rw-register"], default="list-append")
    ap.add_argument("--realtime", action="store_true", help="also require real-time order (strict serializability)")
    a = ap.parse_args()
    anomalies = check(load(a.history), a.model, a.realtime)
    verdict = {"valid": not anomalies, "anomaly-types": sorted(anomalies), "anomalies": {k: v[:5] for k, v in anomalies.items()}}
    try:
        print(json.dumps(verdict, indent=1))
        sys.stdout.flush()
    except BrokenPipeError:
        # A reader that stopped early (| head) is no error of the history's.
        sys.stderr.close()
    sys.exit(0 if not anomalies else 1)


if __name__ == "__main__":
    main()
