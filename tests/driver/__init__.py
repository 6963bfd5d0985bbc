"""Tests of every call of the native driver, one file per native/src file."""
