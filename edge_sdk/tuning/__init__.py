"""Tuning records: schedules `edge-sdk tune` found for our kernels, kept as data.

    records/<target>/<kind>-<hash>.json   shipped with the package (the repo's records)
    ~/.local/share/edge-sdk/tuning/<target>/ a user's own tunes ($XDG_DATA_HOME honoured)

store.py reads, matches and writes them; compile applies the matching ones (lower.apply_tuning).
"""
