"""Screenshot a bench report in headless Chromium, as a reader's browser shows it.

    python benchmarks/report/screenshot.py out/demo/report.html docs/report.png
    python benchmarks/report/screenshot.py --demo docs/report.png   # runs `make demo` first

The picture is the top ``--size`` of the page (default 1400x2400: the summary and the
first plots). Chromium is Debian's package: ``benchmarks/report/install-chromium.sh``
installs it (``make browser``). Nothing is fetched: the report is one self-contained file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "benchmarks/report/install-chromium.sh (as root: apt-get install -y chromium)"
NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str:
    """The Chromium binary: ``$CHROMIUM``, else the first of :data:`NAMES` on PATH."""
    found = os.environ.get("CHROMIUM") or next(filter(None, map(shutil.which, NAMES)), None)
    if not found:
        raise SystemExit(f"headless Chromium not found; install it with {INSTALL}")
    return found


def chromium(args: list[str], *, width: int, height: int, timeout_s: float = 120.0) -> str:
    """Run headless Chromium with a throwaway profile; its stdout (``--dump-dom``)."""
    with tempfile.TemporaryDirectory(prefix="schedkit-chromium-") as profile:
        cmd = [
            find_chromium(),
            "--headless",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--disable-dev-shm-usage",  # containers have a small /dev/shm
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            *args,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done.stdout


def screenshot(page: Path, png: Path, *, width: int = 1400, height: int = 2400) -> Path:
    """Save the top ``width`` x ``height`` pixels of ``page`` as ``png``."""
    png.parent.mkdir(parents=True, exist_ok=True)
    chromium([f"--screenshot={png.resolve()}", page.resolve().as_uri()], width=width, height=height)
    if not png.is_file() or png.stat().st_size == 0:
        raise RuntimeError(f"Chromium wrote no screenshot to {png}")
    return png


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", nargs="?", type=Path, help="a report.html")
    parser.add_argument("png", type=Path, help="where to write the PNG")
    parser.add_argument("--demo", action="store_true", help="run `make demo` and use its report")
    parser.add_argument("--size", default="1400x2400", help="WIDTHxHEIGHT (default 1400x2400)")
    args = parser.parse_args(argv)
    if args.demo:
        subprocess.run(["make", "-C", str(ROOT), "demo"], check=True)
        args.report = ROOT / "out" / "demo" / "report.html"
    if args.report is None:
        parser.error("give a report.html or --demo")
    width, height = (int(v) for v in args.size.lower().split("x"))
    out = screenshot(args.report, args.png, width=width, height=height)
    print(f"wrote {out} ({out.stat().st_size:,} bytes) from {args.report}")


if __name__ == "__main__":
    sys.exit(main())
