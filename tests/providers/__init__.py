"""Tests of the provider adapters against real servers speaking their protocols."""
