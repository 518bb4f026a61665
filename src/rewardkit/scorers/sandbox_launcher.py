"""The launcher that runs inside a confined sandbox (namespaces or bubblewrap), as Python source.

It runs as ``root`` of the sandbox's namespaces (pid 1 of the fresh PID namespace in ``namespaces``
mode), before the untrusted program, and:

1. in ``namespaces`` mode, builds a minimal root on a tmpfs: read-only binds of the system directories
   and of the interpreter's prefixes, a few device nodes, a fresh ``/proc``, a size-capped tmpfs at
   ``/sandbox`` (also ``/tmp``), then ``pivot_root``\\s into it and detaches the old root;
2. writes the program (read from an inherited fd) to ``/sandbox/main.py``;
3. forks the program: rlimits, a distinct uid/gid with no supplementary groups (a nested user namespace
   when the sandbox itself is unprivileged), ``no_new_privs``, death with the launcher, empty environment
   but for a few fixed variables, then ``exec`` of ``python -I main.py``;
4. reaps everything until the program exits, writes its wait status to an inherited fd and exits,
   which kills whatever the program left behind (the PID namespace dies with its first process).

Its own failures exit with :data:`rewardkit.scorers.sandbox.LAUNCH_FAILED` and a line on stderr.
"""

from __future__ import annotations

#: ``limit(name, soft, hard=None)``: set an rlimit, never above what the process already has; and
#: ``apply_limits(c)``: the program's whole set from the launcher config ``c``. Source text shared by
#: this launcher and the unconfined one in :mod:`rewardkit.scorers.sandbox`.
RLIMIT_SOURCE = r"""def limit(name, soft, hard=None):
    res = getattr(resource, name, None)
    if res is None or soft is None:
        return
    hard = soft if hard is None else hard
    _, cur = resource.getrlimit(res)
    if cur != resource.RLIM_INFINITY:
        soft, hard = min(soft, cur), min(hard, cur)
    resource.setrlimit(res, (soft, hard))

def apply_limits(c):
    limit("RLIMIT_CORE", 0)
    limit("RLIMIT_CPU", c["cpu"], c["cpu"] + 1 if c["cpu"] else None)
    limit("RLIMIT_AS", c["as"])
    limit("RLIMIT_FSIZE", c["fsize"])
    limit("RLIMIT_NOFILE", c["nofile"])
    limit("RLIMIT_NPROC", c["nproc"])
"""

LAUNCHER = r"""
import ctypes, json, os, resource, sys
c = json.loads(sys.argv[1])
libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME = 1024, 2048, 4096, 16384, 1 << 18, 1 << 21

def check(r, what):
    if r != 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))

def enc(s):
    return None if s is None else s.encode()

def mount(src, dst, fs, flags, data=None):
    check(libc.mount(enc(src), enc(dst), enc(fs), ctypes.c_ulong(flags), enc(data)), "mount " + dst)

def mkdirs(path, mode=0o711):
    parts, p = path.strip("/").split("/"), ""
    for part in parts:
        p += "/" + part
        if not os.path.lexists(p):
            os.mkdir(p)
            os.chmod(p, mode)

def ro_bind(src, dst):
    if os.path.isdir(src):
        mkdirs(dst)
    else:
        mkdirs(os.path.dirname(dst))
        open(dst, "a").close()
    mount(src, dst, None, MS_BIND | MS_REC)
    # Remounting read-only must keep the flags the source mount has (locked in a user namespace).
    f = os.statvfs(src).f_flag
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | (f & (MS_NODEV | MS_NOEXEC))
    flags |= (MS_NOATIME if f & 1024 else 0) | (MS_NODIRATIME if f & 2048 else 0)
    flags |= MS_RELATIME if f & 4096 else 0
    mount(None, dst, None, flags)

def build_root(root):
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path in c["ro_paths"]:
        if os.path.islink(path) and os.path.dirname(path) == "/":  # merged /usr: /bin -> usr/bin
            os.symlink(os.readlink(path), root + path)
        elif os.path.exists(path):
            ro_bind(path, root + path)
    mkdirs(root + "/dev", 0o755)
    for name in ("null", "zero", "full", "random", "urandom"):
        open(root + "/dev/" + name, "a").close()
        mount("/dev/" + name, root + "/dev/" + name, None, MS_BIND)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"), ("shm", "/sandbox")):
        os.symlink(target, root + "/dev/" + name)
    mkdirs(root + "/proc", 0o555)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    mkdirs(root + "/sandbox", 0o700)
    owner = c["work_owner"]
    mount("tmpfs", root + "/sandbox", "tmpfs", MS_NOSUID | MS_NODEV,
          "size=%dk,nr_inodes=%d,mode=0700,uid=%d,gid=%d" % (c["disk_kb"], c["inodes"], owner, owner))
    # Where the interpreter lives under /tmp, that path stays read-only (TMPDIR is /sandbox).
    if not os.path.lexists(root + "/tmp"):
        os.symlink("/sandbox", root + "/tmp")
    os.chdir(root)
    number = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}.get(os.uname().machine)
    if number is None:
        raise OSError("pivot_root: unknown architecture " + os.uname().machine)
    check(libc.syscall(number, b".", b"."), "pivot_root")
    check(libc.umount2(b".", 2), "detach the old root")  # MNT_DETACH
    os.chdir("/")
    mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)

__RLIMIT__

def nested_user(inner, outer, required):
    # A user namespace of the program's own, in which no further one can be made: the program cannot
    # gain capabilities in a namespace of its own (and mount an uncapped tmpfs there). Unprivileged,
    # it also gives the program a distinct uid (only one is mapped). Capabilities go with the exec.
    libc.prctl(4, 1, 0, 0, 0)  # dumpable again after the uid change (exec would do it too): /proc/self is ours
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        if required:
            check(-1, "unshare(CLONE_NEWUSER)")
        return  # user namespaces are off for unprivileged users here: the program cannot make one either
    for name, text in (("setgroups", "deny"), ("uid_map", "%d %d 1" % (inner, outer)),
                       ("gid_map", "%d %d 1" % (inner, outer))):
        with open("/proc/self/" + name, "w") as f:
            f.write(text)
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0")
    os.setresgid(inner, inner, inner)
    os.setresuid(inner, inner, inner)

try:
    if c["build_root"]:
        build_root(c["root"])
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: the program cannot ptrace or read this process
    with os.fdopen(c["program_fd"], "rb") as f:
        program = f.read()
    os.chdir("/sandbox")
    with open("main.py", "wb") as f:
        f.write(program)
    if c["uid"] is not None and c["drop"] == "setuid":
        os.chown("main.py", c["uid"], c["uid"])
        os.chown("/sandbox", c["uid"], c["uid"])
except BaseException as e:
    os.write(2, ("rewardkit sandbox launcher: %s: %s\n" % (type(e).__name__, e)).encode())
    os._exit(__LAUNCH_FAILED__)
launcher = os.getpid()
pid = os.fork()
if pid == 0:
    try:
        os.close(c["status_fd"])
        apply_limits(c)
        if c["drop"] == "setuid":
            os.setgroups([])
            os.setresgid(c["uid"], c["uid"], c["uid"])
            os.setresuid(c["uid"], c["uid"], c["uid"])
            nested_user(c["uid"], c["uid"], False)
        elif c["drop"] == "userns":
            nested_user(c["uid"], 0, True)
        if os.getuid() == 0 or os.geteuid() == 0:
            raise OSError("refusing to run the program as uid 0")
        check(libc.prctl(38, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
        check(libc.prctl(1, 9, 0, 0, 0), "PR_SET_PDEATHSIG")  # after the uid change, which clears it
        if os.getppid() != launcher:
            os._exit(1)
        os.execve(c["python"], [c["python"], "-I", "main.py"], c["env"])
    except BaseException as e:
        os.write(2, ("rewardkit sandbox launcher: %s: %s\n" % (type(e).__name__, e)).encode())
    os._exit(__LAUNCH_FAILED__)
while True:
    try:
        done, status = os.wait()
    except ChildProcessError:
        status = -1
        break
    if done == pid:
        break
os.write(c["status_fd"], str(status).encode())
os._exit(0)
""".replace("__RLIMIT__\n", RLIMIT_SOURCE)
