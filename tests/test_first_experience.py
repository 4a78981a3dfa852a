"""What a new user sees first: a slow start shows a line that moves (on a terminal redrawn in place, in a log a line
every few seconds), and ``featurize`` says what it loads before torch loads and shows its first bar as soon as the
work starts. Nothing is timed: the tests assert what is shown and in which order."""
import io
import json
import os
import subprocess
import sys
import threading

import cliconv as cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEAVY = ("torch", "timm", "zarr", "torchvision")


class _Stream(io.StringIO):
    """stderr as a log (``tty=False``) or a terminal; ``grew`` is set at each write."""

    def __init__(self, tty: bool):
        super().__init__()
        self.tty, self.grew = tty, threading.Event()

    def isatty(self):
        return self.tty

    def write(self, text):
        n = super().write(text)
        self.grew.set()
        return n


def _run_until(stream, monkeypatch, enough, **kw):
    """A status whose step ends only once ``enough(text written)`` holds (or 120 s, then the test fails)."""
    monkeypatch.setattr(sys, "stderr", stream)
    with cli.status("step", after=0.0, **kw):
        for _ in range(1200):
            if enough(stream.getvalue()):
                break
            stream.grew.wait(0.1)
            stream.grew.clear()
    return stream.getvalue()


def test_in_a_log_a_slow_step_prints_a_line_with_its_time_every_few_seconds(monkeypatch):
    text = _run_until(_Stream(tty=False), monkeypatch, lambda t: t.count("\n") >= 3, every=0.01, log_every=0.01)
    lines = text.splitlines()
    assert lines[0] == "step ..."
    ticks = lines[1:-1]
    assert len(ticks) >= 2 and all(t.startswith("step ... ") and t.endswith(" s") for t in ticks), lines
    assert lines[-1].startswith("step: ") and lines[-1].endswith(" s"), lines


def test_without_log_every_a_log_keeps_its_two_lines(monkeypatch):
    stream = _Stream(tty=False)
    monkeypatch.setattr(sys, "stderr", stream)
    with cli.status("step", after=0.0, every=0.01):
        stream.grew.wait(60)
        threading.Event().wait(0.1)  # ticks would have come by now: every=0.01 is for terminals only
    lines = stream.getvalue().splitlines()
    assert lines[0] == "step ..." and len(lines) == 2 and lines[1].startswith("step: "), lines


def test_on_a_terminal_the_line_is_redrawn_in_place(monkeypatch):
    text = _run_until(_Stream(tty=True), monkeypatch, lambda t: t.count("\r") >= 3, every=0.01, log_every=None)
    redraws = [part for part in text.split("\r") if part.startswith("step ... ")]
    assert len(redraws) >= 3, text
    assert text.rstrip().splitlines()[-1].startswith("step: ")


def test_featurize_says_it_loads_torch_before_it_does_and_shows_its_bar_before_the_first_forward(tmp_path):
    """Every write to stderr is recorded with the heavy modules loaded at that moment, and the first forward pass
    is marked: the loading line comes before torch, the listing line after it, the bar (0 of 360) before the
    first batch is computed."""
    code = (
        "import io, sys\nimport featurize.__main__ as m\nseen = []\n"
        "class Err(io.StringIO):\n"
        "    def isatty(self):\n        return False\n"
        f"    def write(self, t):\n        seen.append((t, sorted(x for x in {HEAVY!r} if x in sys.modules)))\n"
        "        return len(t)\n"
        "real_err, sys.stderr = sys.stderr, Err()\n"
        "import atexit\natexit.register(lambda: real_err.write(''.join(t for t, _ in seen)))\n"
        "import builtins\nreal_import = builtins.__import__\n"
        "def spy(name, *a, **k):\n"
        "    module = real_import(name, *a, **k)\n"
        "    job = sys.modules.get('featurize.job')\n"
        "    if job is not None and hasattr(job, '_forward') and not hasattr(job, 'spied'):\n"
        "        job.spied, forward = True, job._forward\n"
        "        def marked(*a, **k):\n            seen.append(('FORWARD', []))\n            return forward(*a, **k)\n"
        "        job._forward = marked\n"
        "    return module\n"
        "builtins.__import__ = spy\n"
        f"rc = m.main(['--backbone', 'pixels', '--dataset', 'digits', '--split', 'test', '--num-workers', '0', "
        f"'--out', {str(tmp_path / 'x.zarr')!r}])\n"
        "builtins.__import__ = real_import\n"
        "import json\nprint(rc)\nprint(json.dumps([(t, h) for t, h in seen if t.strip()]))")
    r = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True,
                       text=True, timeout=600)
    out = r.stdout.splitlines()
    assert out and out[0] == "0", (r.stdout, r.stderr)
    events = json.loads(out[1])
    texts = [t for t, _ in events]

    def first(pred):
        return next(i for i, t in enumerate(texts) if pred(t))

    assert texts[0] == "featurize: loading torch and torchvision ..." and events[0][1] == [], events[:2]
    loaded = first(lambda t: t.startswith("featurize: loading torch and torchvision: "))
    listing = first(lambda t: t.startswith("featurize: listing digits and loading pixels ..."))
    bar = first(lambda t: "digits:test" in t and "0/360" in t)
    forward = texts.index("FORWARD")
    summary = first(lambda t: "[test]: 360 images" in t)
    assert 0 < loaded < listing < bar < forward < summary, texts
    assert "torch" in events[loaded][1]
