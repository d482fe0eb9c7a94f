"""One run from start to end: record it, start the workers, stage the data, search until the
deadline, score, verify and finish; and the ways a run that stopped early is closed (recover) or
continued (resume). The flows in flows/ tell this story as Prefect tasks; everything here runs
without Prefect.
"""
