"""The bwrap backend's seccomp filter: a denylist after Docker's default profile, built with libseccomp.

Source of the list: moby's default seccomp profile (github.com/moby/profiles, ``seccomp/default.json``,
as of 2026-06): every syscall it allows only with a capability the sandbox never has (CAP_SYS_ADMIN,
CAP_SYS_BOOT, CAP_SYS_MODULE, CAP_SYS_PACCT, CAP_SYS_RAWIO, CAP_SYS_TIME, CAP_SYS_TTY_CONFIG,
CAP_SYS_NICE, CAP_SYSLOG, CAP_DAC_READ_SEARCH, CAP_SYS_PTRACE's kcmp / pidfd_getfd /
process_madvise), or never allows (keyrings, kexec, swap, io_uring, userfaultfd, pivot_root,
obsolete calls), returns EPERM, as there. Also as there: ``clone`` with a namespace flag is
EPERM and ``clone3`` ENOSYS (its flags are behind a pointer; glibc then falls back to ``clone``);
``personality`` only with 0, PER_LINUX32, UNAME26 (and both) or the 0xffffffff query; ``socket``
not for AF_ALG (38) and AF_VSOCK (40). ``ptrace`` and ``process_vm_readv/writev`` stay allowed,
as Docker allows them on kernels >= 4.8: debuggers work, and the runner is not dumpable. ``adjtimex``
and ``clock_adjtime`` are denied outright (Docker allows their read-only form).

Added here: ``chmod``-family calls whose mode has S_ISUID or S_ISGID are EPERM, and so are
``open``/``openat``/``creat``/``mknod``/``mknodat``/``mkdir``/``mkdirat`` whose mode has either bit, so
no setid file reaches a host workspace; ``openat2`` is ENOSYS (its mode is behind a pointer; callers
fall back to ``openat``); the TIOCSTI and TIOCLINUX ioctls (terminal input injection) are EPERM.

Not an allowlist: a syscall newer than this list is allowed. Calls of another ABI than the host's
(x86_64 also gets the same rules for i386; x32 and others) kill the process.
"""

from __future__ import annotations

import errno
import functools
import os

DENIED = (
    # mounts, old and new API; root switching
    "mount", "umount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
    "mount_setattr", "pivot_root", "chroot",
    # namespaces (clone's flags: see CLONE_NS_FLAGS)
    "unshare", "setns",
    # kernel, modules, power, swap, accounting, quotas
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "create_module",
    "query_module", "get_kernel_syms", "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
    # keyrings, bpf, perf, userfaultfd, io_uring, fanotify, syslog, lookup_dcookie
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "fanotify_init", "syslog", "lookup_dcookie",
    # clocks, host names, raw I/O, handles, NUMA policy, tty hangup
    "settimeofday", "stime", "clock_settime", "clock_settime64", "adjtimex", "clock_adjtime",
    "clock_adjtime64", "sethostname", "setdomainname", "iopl", "ioperm", "open_by_handle_at",
    "get_mempolicy", "set_mempolicy", "set_mempolicy_home_node", "mbind", "migrate_pages", "move_pages",
    "vhangup",
    # other processes' file descriptors and memory advice (CAP_SYS_PTRACE in Docker's profile)
    "kcmp", "pidfd_getfd", "process_madvise",
    # obsolete or never implemented
    "_sysctl", "sysfs", "ustat", "uselib", "nfsservctl", "afs_syscall", "getpmsg", "putpmsg", "security",
    "tuxcall", "vserver", "lsm_get_self_attr", "lsm_set_self_attr", "lsm_list_modules",
)
#: Fail with ENOSYS so that callers fall back to an older call we can filter.
NOT_IMPLEMENTED = ("clone3", "openat2")
#: syscall -> index of its mode argument: EPERM when the mode has S_ISUID or S_ISGID.
MODE_ARG = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "open": 2, "openat": 3, "creat": 1,
            "mknod": 1, "mknodat": 2, "mkdir": 1, "mkdirat": 2}
SETID_BITS = (0o4000, 0o2000)  # S_ISUID, S_ISGID
#: CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET (linux/sched.h).
CLONE_NS_FLAGS = (0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
#: personality flag bits allowed (PER_LINUX32 = 8, UNAME26 = 0x20000); 0xffffffff only queries.
PERSONALITY_SAFE_BITS = 0x8 | 0x20000
TTY_INJECTION_IOCTLS = (0x5412, 0x541C)  # TIOCSTI, TIOCLINUX
DENIED_SOCKET_FAMILIES = (38, 40)  # AF_ALG, AF_VSOCK
INSTALL_HINT = ("seccomp: true needs the pyseccomp package and libseccomp: pip install pyseccomp; on Debian or "
                "Ubuntu apt-get install libseccomp2 (or set seccomp: false to run without a filter)")


class SeccompUnavailable(RuntimeError):
    """pyseccomp or libseccomp is missing; the message says what to install."""


@functools.lru_cache(maxsize=1)
def filter_bpf() -> bytes:
    """The filter as classic BPF, the form bwrap's ``--seccomp FD`` reads (built once per process).

    Raises:
        SeccompUnavailable: pyseccomp or libseccomp is not installed.
    """
    try:
        import pyseccomp
    except (ImportError, RuntimeError) as exc:  # pyseccomp raises RuntimeError without libseccomp
        raise SeccompUnavailable(f"{INSTALL_HINT} ({exc})") from None
    flt = build_filter(pyseccomp)
    fd = os.memfd_create("swe-sandbox-seccomp")
    try:
        with open(fd, "wb", closefd=False) as out:
            flt.export_bpf(out)
        os.lseek(fd, 0, os.SEEK_SET)
        return b"".join(iter(lambda: os.read(fd, 1 << 16), b""))
    finally:
        os.close(fd)


def build_filter(sc):
    """The ``pyseccomp.SyscallFilter`` (``sc`` is the pyseccomp module): allow by default, deny the above."""
    flt = sc.SyscallFilter(sc.ALLOW)
    if sc.system_arch() == sc.Arch.X86_64:
        flt.add_arch(sc.Arch.X86)  # 32-bit binaries get the same rules (added before any rule)
    eperm = sc.ERRNO(errno.EPERM)
    for name in DENIED:
        _add(sc, flt, eperm, name)
    for name in NOT_IMPLEMENTED:
        _add(sc, flt, sc.ERRNO(errno.ENOSYS), name)
    for name, index in MODE_ARG.items():
        for bit in SETID_BITS:
            _add(sc, flt, eperm, name, sc.Arg(index, sc.MASKED_EQ, bit, bit))
    for flag in CLONE_NS_FLAGS:
        _add(sc, flt, eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    for request in TTY_INJECTION_IOCTLS:
        _add(sc, flt, eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
    for family in DENIED_SOCKET_FAMILIES:
        _add(sc, flt, eperm, "socket", sc.Arg(0, sc.EQ, family))
    _deny_personalities(sc, flt, eperm)
    return flt


def _deny_personalities(sc, flt, action) -> None:
    """EPERM for every personality but 0, 8, 0x20000, 0x20008 and the 0xffffffff query. libseccomp
    takes one comparison per argument, so: any unsafe bit below 31 with bit 31 clear, or bit 31 set
    with any other bit clear (the query is the only value with all 32 bits set)."""
    top = 1 << 31
    for bit in range(31):
        if not (1 << bit) & PERSONALITY_SAFE_BITS:
            _add(sc, flt, action, "personality", sc.Arg(0, sc.MASKED_EQ, (1 << bit) | top, 1 << bit))
        _add(sc, flt, action, "personality", sc.Arg(0, sc.MASKED_EQ, (1 << bit) | top, top))


def _add(sc, flt, action, name: str, *args) -> None:
    """Add one rule; a syscall this libseccomp or architecture does not know is skipped."""
    if sc.resolve_syscall(sc.Arch.NATIVE, name) < 0:
        return
    flt.add_rule(action, name, *args)
