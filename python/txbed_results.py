"""Load txbed results into Python with one call.

    import txbed_results as tx
    runs = tx.load("results/protocols-modes")   # a sweep directory: results.csv, one row per run
    report = tx.load("runs/a")                  # a run directory (txbed run --out): report.json
    df = tx.load("results/protocols-modes", dataframe=True)   # a pandas DataFrame

Standard library only (csv, json); pandas is used only when a DataFrame is asked for.
Every column and field is described in docs/results.md.
"""

import csv
import json
import os

__all__ = ["load", "load_csv", "load_report", "load_history"]


def _value(text):
    """A CSV cell as int, float, bool or None where it is one, else the string."""
    if text == "":
        return None
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def load_csv(path):
    """A txbed CSV (results.csv, summary.csv, sensitivity.csv) as a list of dicts, typed."""
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: _value(v) for k, v in row.items()} for row in csv.DictReader(f)]


def load_report(path):
    """A report.json as a dict."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_history(path):
    """A history.jsonl as a list of dicts, one per transaction record."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load(path, dataframe=False):
    """A sweep directory (results.csv), a run directory (report.json), or one .csv, .json or
    .jsonl file. With dataframe=True, a pandas DataFrame (a report is flattened into one row
    with dotted column names)."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file or directory")
    if os.path.isdir(path):
        for name in ("results.csv", "sensitivity.csv", "report.json"):
            candidate = os.path.join(path, name)
            if os.path.isfile(candidate):
                path = candidate
                break
        else:
            raise FileNotFoundError(f"{path}: no results.csv, sensitivity.csv or report.json in it")
    if path.endswith(".csv"):
        data = load_csv(path)
    elif path.endswith(".jsonl"):
        data = load_history(path)
    elif path.endswith(".json"):
        data = load_report(path)
    else:
        raise ValueError(f"{path}: expected a .csv, .json or .jsonl file or a txbed output directory")
    if not dataframe:
        return data
    import pandas as pd

    return pd.json_normalize(data if isinstance(data, list) else [data])
