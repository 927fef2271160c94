"""The seccomp filter of the command sandbox: no set-user-ID or set-group-ID bit on any file.

A command runs with the server's user id, so a file it makes is that user's on the host, and a
set-user-ID bit on it (`chmod u+s` of a copy of `/bin/sh`) makes a program that runs as the
server's user (root, for a server run as root) for whoever starts it: any local user who can
reach the workspace. No capability is needed for it (the owner of a file may set the bit), so the
sandbox's `--cap-drop ALL` does not stop it; a seccomp filter does, by the system calls' own
arguments: `chmod`, `fchmod`, `fchmodat` and `fchmodat2` with either bit in their mode, and
`open`, `openat`, `creat`, `mknod` and `mknodat` creating a file with one, fail with `EPERM`.
`openat2` (its mode lies in a structure a filter cannot read) and `io_uring_setup` (whose
operations a filter never sees) fail with `ENOSYS`, which programs take as "not here" and fall
back from. Every other call, and every other mode, is let through.

The filter is compiled by libseccomp (through `ctypes`: `libseccomp.so.2`, present wherever
systemd is) into the BPF program bwrap loads (`--seccomp FD`); a system call of another
architecture (a 32-bit `int 0x80`) kills the process, libseccomp's default. Where libseccomp is
missing, `filter_program` is None and commands run without it (logged once); where libseccomp
fails to build it, None too, logged with libseccomp's reason, and tried again for the next command.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import logging
import os
import stat

__all__ = ["filter_program"]

_log = logging.getLogger("delegate.sandbox")
_ALLOW = 0x7FFF0000
_MASKED_EQ = 7  # SCMP_CMP_MASKED_EQ: (argument & datum_a) == datum_b
_SPECIAL = (stat.S_ISUID, stat.S_ISGID)
_MODE_ARGUMENT = {
    "chmod": 1,
    "fchmod": 1,
    "fchmodat": 2,
    "fchmodat2": 2,
    "open": 2,
    "openat": 3,
    "creat": 1,
    "mknod": 1,
    "mknodat": 2,
}
"""The system calls that set a file's mode, and which of their arguments holds it."""
_REFUSED = ("openat2", "io_uring_setup")
"""System calls whose mode no filter can read: refused whole (`ENOSYS`)."""
_NEWER = {"fchmodat2": 452, "openat2": 437, "io_uring_setup": 425}
"""Calls an older libseccomp may not know by name, by number (the same on every architecture:
they came after the tables were unified). Linux 5.1 added `io_uring_setup`, 5.6 `openat2`, 6.6
`fchmodat2`."""


class _Compare(ctypes.Structure):
    """libseccomp's `struct scmp_arg_cmp`: a test of one argument of a system call."""

    _fields_ = [
        ("arg", ctypes.c_uint),
        ("op", ctypes.c_int),
        ("datum_a", ctypes.c_uint64),
        ("datum_b", ctypes.c_uint64),
    ]


def _errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)  # SCMP_ACT_ERRNO


def filter_program() -> bytes | None:
    """The filter, as the BPF program bwrap's `--seccomp` reads; None, logged with why, without
    libseccomp or when it fails to build the filter. Its first call looks for the library
    (`ldconfig -p`): not on an event loop."""
    lib = _library()
    if lib is None:
        return None
    try:
        return _compiled(lib)
    except OSError as error:
        _log.warning("the seccomp filter cannot be built (%s): this command may make set-user-ID files", error)
        return None


@functools.cache
def _library() -> ctypes.CDLL | None:
    """libseccomp, its functions typed; None (logged) where it is not installed."""
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError:
        _log.warning("libseccomp is not installed: commands may make set-user-ID files (install libseccomp2)")
        return None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(_Compare),
    ]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


@functools.cache  # a failure raises, so it is not kept: the next command tries again
def _compiled(lib: ctypes.CDLL) -> bytes:
    """The filter built by `lib`; `OSError` saying which step of libseccomp failed and why."""
    ctx = lib.seccomp_init(_ALLOW)
    if not ctx:
        raise OSError(errno.ENOMEM, "seccomp_init failed")
    try:
        for call, argument in _MODE_ARGUMENT.items():
            number = _number(lib, call)
            if number < 0:  # not a call of this architecture (`open` on arm64)
                continue
            for bit in _SPECIAL:
                compare = _Compare(argument, _MASKED_EQ, bit, bit)
                _check(
                    lib.seccomp_rule_add_array(ctx, _errno(errno.EPERM), number, 1, ctypes.byref(compare)),
                    f"seccomp_rule_add_array({call})",
                )
        for call in _REFUSED:
            number = _number(lib, call)
            if number >= 0:
                _check(
                    lib.seccomp_rule_add_array(ctx, _errno(errno.ENOSYS), number, 0, None),
                    f"seccomp_rule_add_array({call})",
                )
        read, write = os.pipe()
        try:
            _check(lib.seccomp_export_bpf(ctx, write), "seccomp_export_bpf")
            os.close(write)
            write = -1
            return _read_all(read)
        finally:
            os.close(read)
            if write >= 0:
                os.close(write)
    finally:
        lib.seccomp_release(ctx)


def _number(lib: ctypes.CDLL, call: str) -> int:
    """The number of system call `call` here, by libseccomp's tables or else `_NEWER`; -1 when
    it is not a call of this architecture."""
    number = lib.seccomp_syscall_resolve_name(call.encode())
    return number if number >= 0 else _NEWER.get(call, -1)


def _check(result: int, step: str) -> None:
    """Raise `OSError` for libseccomp's `result` of `step` when it failed (a negative errno)."""
    if result != 0:
        raise OSError(-result, f"libseccomp failed at {step}: {os.strerror(-result)}")


def _read_all(fd: int) -> bytes:
    chunks: list[bytes] = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks)


def filter_fd(program: bytes | None) -> int | None:
    """A descriptor holding the filter `program` (`filter_program`'s), for bwrap's `--seccomp`
    (inheritable; the caller closes it once the command started); None without one."""
    if program is None:
        return None
    fd = os.memfd_create("delegate-seccomp", 0)
    try:
        os.write(fd, program)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
