"""Tests of the aggregation pipeline and its stages."""
