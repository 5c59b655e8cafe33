"""`edge-sdk tune`: search MetaSchedule schedules for our kernels and keep the ones that beat ours.

    kernels.collect(model, target)   -> the distinct kernel workloads of a model (unscheduled PrimFuncs)
    measure / session                -> time our schedule, run MetaSchedule on the workload, keep the winner
    store                            -> read, match and write tuning records; compile applies the matching ones
                                        (lower.apply_tuning)

The records are data, one JSON file per (target, kernel workload):
    records/<target>/<kind>-<hash>.json        shipped with the package (the repo's records)
    ~/.local/share/edge-sdk/tuning/<target>/   a user's own tunes ($XDG_DATA_HOME honoured)

device_runner.py (ships candidates over SSH, times them with the device runtime) is the runner for
--device; locally the host is timed with MetaSchedule's LocalRunner.
"""
