"""Tests of every call of the native driver, one file per concept of native/src."""
