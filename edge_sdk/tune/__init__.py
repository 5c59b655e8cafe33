"""`edge-sdk tune`: search MetaSchedule schedules for our kernels and keep the ones that beat ours.

    kernels.collect(model, target)   -> the distinct kernel workloads of a model (unscheduled PrimFuncs)
    measure / session                -> time our schedule, run MetaSchedule on the workload, keep the winner
    edge_sdk.tuning.records          -> the record files (in the repo, or per user) compile applies

device_runner.py (ships candidates over SSH, times them with the device runtime) is the runner for
--device; locally the host is timed with MetaSchedule's LocalRunner.
"""
