"""`edge-agent doctor`: can this machine run the agent? `run` runs the checks in groups, `report`
holds what one check reports, `checks` the audio and model checks, `database` the memory
database's."""
