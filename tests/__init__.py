"""The tests, one folder per package of stalewatch; helpers in :mod:`tests.support`."""
