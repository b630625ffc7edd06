"""A synthetic world of ad requests, written as request logs in the contract's format."""

from solaris_lib.simulate.config import WorldConfig

__all__ = ["WorldConfig"]
