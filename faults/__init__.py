"""Fault injection for linc's platform: real servers on loopback and the fault matrix.

``python -m faults`` runs every row of the matrix (see :mod:`faults.scenarios`) and prints
fault -> outcome -> metrics lost -> duplicated steps -> runs left RUNNING.
"""
