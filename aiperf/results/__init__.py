"""What a run leaves behind: its score, its division, the event log (written as the run goes, read
back without a database), the checks that recompute the score, and the result package.
"""
