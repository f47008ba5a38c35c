"""`trainrun mpi|torch|spark|spark-pool|ray|doctor|selftest`: parse options into a job (trainrun.arguments), plan it,
then print (trainrun.messages) or run the plan. The `%%trainrun` magic (trainrun.notebook) parses, plans and prints with the
same functions."""
from __future__ import annotations

import os
import sys
import time
from typing import Sequence

from .advice import unknown_variables
from .arguments import build_parser, job_from_args
from .backends import plan_job
from .errors import JobFailed, TrainrunError
from .machine import detect_machine
from .messages import announce, ending, plan_text
from .program import check_program_here


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser(argv[0] if argv else None).parse_args(argv)
        if args.backend == "doctor":
            from .doctor import main as doctor_main

            return doctor_main(args.json)
        if args.backend == "selftest":
            from .selftest.driver import main as selftest_main

            return selftest_main(args)
        job = job_from_args(args)
        for warning in unknown_variables(os.environ):
            print(f"trainrun: warning: {warning}", file=sys.stderr)
        plan = plan_job(job, detect_machine(args.backend))
        if args.dry_run:
            sys.stdout.write(plan_text(plan, args.json))
            return 0
        if plan.ranks_start_here():
            check_program_here("command", job.program)
        announce(plan)
        from .runner import run_plan

        started = time.monotonic()
        try:
            run_plan(plan)
        except JobFailed as err:
            sys.stderr.write(ending(plan, time.monotonic() - started, err))
            return err.exit_code
        sys.stderr.write(ending(plan, time.monotonic() - started, None))
        return 0
    except TrainrunError as err:
        print(f"trainrun: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
