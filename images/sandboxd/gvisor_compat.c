/*
 * envfarm-gvisor-compat: a tiny library envfarm preloads (/etc/ld.so.preload) into sandboxes
 * that run under gVisor (runsc), and only there.
 *
 * gVisor releases before 2023 reject statx(2) with the AT_NO_AUTOMOUNT flag (EINVAL), which
 * coreutils 9 passes on every call: `ls` and `stat` then fail on every path ("cannot access
 * '/': Invalid argument") in Debian 12 and other current images. Nothing is ever automounted
 * inside a sandbox, so the flag means nothing there: this statx drops it and makes the call.
 * It needs nothing but glibc's syscall(), so it loads in any glibc image; musl ignores
 * /etc/ld.so.preload and static programs do not use it.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

struct statx;

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *buf) {
    return (int)syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}
