"""Runs in the builder stage: fetches NVIDIA's apt keyring package, or stops the build saying why.

It is the first request to NVIDIA's CUDA apt repository, so an unreachable repository fails the
build here, before gigabytes of wheels are installed, with a message instead of an apt warning.
"""
from __future__ import annotations

import argparse
import ssl
import sys
import urllib.error
import urllib.request
from pathlib import Path

TIMEOUT_S = 60


def fetch(url: str, target: Path, ca_bundle: Path | None) -> None:
    context = ssl.create_default_context(cafile=str(ca_bundle) if ca_bundle else None)
    with urllib.request.urlopen(url, timeout=TIMEOUT_S, context=context) as response:
        target.write_bytes(response.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("target", type=Path)
    parser.add_argument("--ca-bundle", type=Path)
    args = parser.parse_args()
    try:
        fetch(args.url, args.target, args.ca_bundle)
    except (urllib.error.URLError, OSError) as exc:
        print(
            f"error: NVIDIA's CUDA apt repository, where this build takes nvcc and the CUDA headers, is unreachable "
            f"({args.url}: {exc}); build with --set cuda.build_tools=debian (Debian's packages), or where "
            "developer.download.nvidia.com is reachable (HTTPS_PROXY and --ca-bundle apply)",
            file=sys.stderr,
        )
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
