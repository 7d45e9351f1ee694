"""Worked examples that extend linc from outside its packages (the tutorials and tests import
them): ``route_limit``, a problem added through its specification alone."""
