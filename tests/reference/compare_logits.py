#!/usr/bin/python3
"""Compare a logits file with an oracle's, the way the model-family fixtures are judged.

  compare_logits.py ORACLE.logits OTHER.logits [--clear-positions LIST |
                    --manifest manifest.json | --clear-margin M] [--max-rms-sd X]
                    [--label TEXT] [--report-only]

Both files: int32 n_positions, int32 n_vocab, then float32 rows, little-endian
(the `sipllm run --logits-out` and gguf_reference.py --out format).

For every position p it prints r_p = RMS(OTHER_p - ORACLE_p) / sd(ORACLE_p),
where sd is the standard deviation of the oracle's row, and both top-1 tokens;
overall is sqrt(mean of r_p^2) over the positions. It passes when overall <= X
and the top-1 token agrees at every clear position (positions where the
oracle's best logit stands clear of the second, so a disagreement there means
something). The largest single difference is not a criterion: engines that
round activations to 8 bits move single logits a lot and whole rows little.

--manifest takes the clear positions from tests/fixtures/arch/manifest.json
(the entry whose logits file is ORACLE), and checks that ORACLE's top-1 tokens
are the manifest's, so that a wrong or damaged oracle file cannot pass.
--clear-margin M finds them in ORACLE itself, by the manifest's rule: the best
logit beats the second by at least M times the row's standard deviation (the
manifest uses 0.05). --report-only prints the same figures but judges nothing.

Exit codes: 0 pass, 1 fail, 2 bad input.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np


class InputError(Exception):
    """Bad input; reported as one line, exit code 2."""


def read_logits(path):
    try:
        with open(path, 'rb') as f:
            buf = f.read()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}")
    if len(buf) < 8:
        raise InputError(f"{path}: truncated logits file ({len(buf)} bytes, no header)")
    n_pos, n_vocab = struct.unpack('<ii', buf[:8])
    if n_pos <= 0 or n_vocab <= 0 or len(buf) != 8 + 4 * n_pos * n_vocab:
        raise InputError(f"{path}: header says {n_pos}x{n_vocab} float32 but the file "
                         f"has {len(buf) - 8} data bytes")
    return np.frombuffer(buf, '<f4', offset=8).reshape(n_pos, n_vocab).astype(np.float64)


def parse_positions(text, n_pos):
    try:
        positions = sorted({int(t) for t in text.replace(',', ' ').split()})
    except ValueError:
        raise InputError(f"--clear-positions must be integers, got {text!r}")
    bad = [p for p in positions if not 0 <= p < n_pos]
    if bad:
        raise InputError(f"clear position {bad[0]} is outside 0..{n_pos - 1}")
    return positions


def manifest_entry(manifest_path, oracle_path):
    """The manifest's record of the file whose logits are `oracle_path`."""
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot read manifest {manifest_path}: {e}")
    name = os.path.basename(oracle_path)
    for entry in manifest.values():
        for record in entry.get('files', {}).values() if isinstance(entry, dict) else ():
            if record.get('logits') == name:
                return record
    raise InputError(f"{manifest_path} has no file whose logits are {name}")


def clear_by_margin(oracle, margin):
    """Positions whose best logit beats the second by >= margin * the row's sd."""
    top2 = np.sort(oracle, axis=1)[:, -2:]
    return [p for p in range(oracle.shape[0])
            if top2[p, 1] - top2[p, 0] >= margin * oracle[p].std()]


def compare(oracle, other, clear, max_rms_sd, label='', report_only=False):
    """Prints the table and the verdict; returns True when it passes."""
    if oracle.shape != other.shape:
        print(f"FAIL{label}: shape differs: oracle {oracle.shape[0]}x{oracle.shape[1]}, "
              f"other {other.shape[0]}x{other.shape[1]}")
        return False
    if not np.all(np.isfinite(other)):
        p, i = np.argwhere(~np.isfinite(other))[0]
        print(f"FAIL{label}: non-finite value {other[p, i]} at position {p}, index {i}")
        return False
    sd = oracle.std(axis=1)
    if np.any(sd == 0):
        raise InputError("an oracle row is constant: no scale to measure against")
    r = np.sqrt(((other - oracle) ** 2).mean(axis=1)) / sd
    top_o, top_x = oracle.argmax(axis=1), other.argmax(axis=1)
    print(f"{'pos':>4} {'rms/sd':>8} {'top1 oracle':>11} {'other':>6}")
    for p in range(len(r)):
        mark = (' clear' if p in clear else '') + ('' if top_o[p] == top_x[p] else ' DIFFERS')
        print(f"{p:4d} {r[p]:8.4f} {top_o[p]:11d} {top_x[p]:6d}{mark}")
    overall = float(np.sqrt(np.mean(r ** 2)))
    agree = [p for p in clear if top_o[p] == top_x[p]]
    missed = [p for p in clear if top_o[p] != top_x[p]]
    ok = overall <= max_rms_sd and not missed
    verdict = 'REPORT' if report_only else 'PASS' if ok else 'FAIL'
    limit = '' if report_only else f"max {max_rms_sd:g}; "
    print(f"{verdict}{label}: rms/sd {overall:.4f} ({limit}"
          f"worst position {int(np.argmax(r))} at {r.max():.4f}); top-1 agrees at "
          f"{len(agree)}/{len(clear)} clear positions"
          + (f" (not at {' '.join(map(str, missed))})" if missed else ''))
    return ok


def fixture_bound(manifest_path, model_path):
    """The RMS/sd bound for a fixture: 0.03, or for a file whose manifest
    record gives numpy_check (llama.cpp's own mean |difference|/sd from
    float64 arithmetic) max(0.03, 2 x that); with the mean, or None."""
    name = os.path.basename(model_path)
    with open(manifest_path) as f:
        manifest = json.load(f)
    for entry in manifest.values():
        for rec in (entry.get('files', {}).values() if isinstance(entry, dict) else ()):
            if rec.get('file') == name and 'numpy_check' in rec:
                mean = rec['numpy_check']['mean_dsd']
                return max(0.03, 2 * mean), mean
    return 0.03, None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ['--bound']:
        # compare_logits.py --bound MANIFEST MODEL.gguf: prints the bound, and
        # the manifest's numpy_check mean when it gives one
        if len(argv) != 3:
            print("usage: compare_logits.py --bound MANIFEST MODEL.gguf", file=sys.stderr)
            return 2
        bound, mean = fixture_bound(argv[1], argv[2])
        print(bound if mean is None else f"{bound} {mean}")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('oracle', help='the logits to match (its rows give the scale)')
    ap.add_argument('other', help='the logits to judge')
    ap.add_argument('--clear-positions', metavar='LIST',
                    help='positions (comma- or space-separated) where top-1 must agree')
    ap.add_argument('--manifest', metavar='FILE',
                    help="take the clear positions from this fixture manifest, and check "
                         "the oracle's top-1 tokens against it")
    ap.add_argument('--clear-margin', type=float, metavar='M',
                    help="clear positions: where the oracle's best logit beats the second "
                         "by at least M row standard deviations")
    ap.add_argument('--report-only', action='store_true',
                    help='print the figures, pass whatever they are')
    ap.add_argument('--max-rms-sd', type=float, default=0.03, metavar='X',
                    help='largest overall RMS(difference)/sd that passes (default 0.03)')
    ap.add_argument('--label', default='', help='text to print after PASS/FAIL')
    args = ap.parse_args(argv)
    if sum(x is not None and x is not False
           for x in (args.clear_positions, args.manifest, args.clear_margin)) > 1:
        ap.error('give one of --clear-positions, --manifest and --clear-margin')
    try:
        oracle, other = read_logits(args.oracle), read_logits(args.other)
        clear = []
        if args.clear_positions is not None:
            clear = parse_positions(args.clear_positions, oracle.shape[0])
        if args.manifest:
            record = manifest_entry(args.manifest, args.oracle)
            expected = record.get('top1_per_position', [])
            if list(oracle.argmax(axis=1)) != expected:
                raise InputError(f"{args.oracle}: its top-1 tokens are not the manifest's "
                                 f"{expected}: wrong or damaged oracle file")
            clear = parse_positions(' '.join(map(str, record['clear_positions'])),
                                    oracle.shape[0])
        if args.clear_margin is not None:
            clear = clear_by_margin(oracle, args.clear_margin)
        label = f' {args.label}' if args.label else ''
        ok = compare(oracle, other, clear, args.max_rms_sd, label, args.report_only)
        return 0 if ok or args.report_only else 1
    except InputError as e:
        print(f"compare_logits.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == '__main__':
    sys.exit(main())
