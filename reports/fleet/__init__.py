"""The fleet: each device judged against its siblings of the same model and against its own past
(docs/fleet.md). Its words and exit policy (status.py), the walls a case tells (walls.py), the
settings (options.py), the robust statistics and lines (robust.py), the deviations case by case and
wall by wall (deviations.py), tonight's status of each wall (statuses.py), own history and fleet
shifts (history.py), the records and their JSON (records.py), and the judgement of a night
(judge.py). Which runs make a night is db/nights.py; what the fleet reads, reports/data/fleet_reads.py."""
