"""The end of a comparison worker: one run per ZeRO stage asked for, rank 0 writing every
run's JSON result into one file (the test reads it)."""
import json


def run_and_write(run, stage_list, out, rank):
    """run(stage, prefix) -> JSON-able result, for each stage of the comma-separated list."""
    results = {}
    for stage in [int(s) for s in stage_list.split(",")]:
        results[stage] = run(stage, f"{out}.{stage}")
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
