"""`python -m bench.profiledgateway OUT`: `agui-gateway run` under pyinstrument, on signal.

For profiling the gateway as the latency scenario runs it (a process of its
own): SIGUSR1 starts sampling, SIGUSR2 stops it and writes
`OUT/profile-latency.{txt,html,json}` (the JSON is `Profile.summary()`), so
startup, group join and restore stay out of the profile. Otherwise it is the
service's own command line (`gateway.cli.main(["run"])`).
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from types import FrameType

from bench.profiling import Profile


def main(out: Path) -> int:
    prof = Profile("latency", out)

    def start(signum: int, frame: FrameType | None) -> None:
        prof.start()

    def stop(signum: int, frame: FrameType | None) -> None:
        prof.stop()
        (out / "profile-latency.json").write_text(json.dumps(prof.summary(), indent=1))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from gateway.cli import main as gateway_main

    return gateway_main(["run"])


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
