"""``flexq verify``: is a checkpoint whole and loadable, known before a long load.

For users about to load a large download: :func:`flexq.verify` (in :mod:`flexq.check.api`)
returns a :class:`flexq.check.report.VerifyReport`; ``flexq verify`` prints it.
"""
