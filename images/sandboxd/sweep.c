/*
 * The helper's sweep: every process of the container killed but the helper, which is the
 * container's init (PID 1), so that the agent's container can be its own clean room without
 * the engine restarting it (envfarm/grading/inplace.py). Included by sandboxd.c.
 *
 *   sweep {since}   -> done {rounds, tmpfs: [mount point], residue: [reason]}
 *                      error ENOTSUP when the helper is not PID 1
 *                      error EBUSY when some process outlived SIGKILL for SWEEP_LIMIT_S
 *
 * As PID 1 the helper is the one process the others cannot signal (the kernel drops every
 * signal to a namespace's init it has no handler for, and SIGKILL always), and it is not
 * dumpable (main), so without CAP_SYS_PTRACE no process can trace it, read or write its memory,
 * or open its stdin and stdout through /proc: what it does after the sweep is what envfarm asked.
 * kill(-1, SIGKILL) from PID 1 reaches every other process of the namespace at once (the kernel
 * walks them under the lock fork takes, so none is created meanwhile, and a process with a
 * SIGKILL pending forks no more); it is repeated, reaping, until no process is left to signal.
 *
 * What an engine restart would also have reset is reported, not repaired: an entry of /dev (a
 * tmpfs the runtime fills at start) changed after `since`, a file bind-mounted over the image's
 * (/etc/hosts, /etc/resolv.conf, /etc/hostname) changed after `since`, System V IPC objects or
 * POSIX message queues (a restart makes a new IPC namespace). Any residue and envfarm restarts
 * the container after all. `tmpfs` lists the writable tmpfs mounts (but /dev, and the masks
 * under /proc and /sys) a restart would have emptied: envfarm empties them (`remove` with
 * `contents`) once its second tamper snapshot has seen what was planted there.
 */
#include <sys/prctl.h>

#define SWEEP_LIMIT_S 10.0
#define MAX_RESIDUE 16

static double sweep_since;
static buf *sweep_residue;
static size_t sweep_nresidue;

static void add_residue(const char *what, const char *path) {
    if (sweep_nresidue++ >= MAX_RESIDUE) return;
    if (sweep_nresidue > 1) bputs(sweep_residue, ",");
    buf text = {0};
    bputs(&text, what);
    if (path) bputs(&text, " "), bputs(&text, path);
    bput(&text, "", 1);
    bjstr(sweep_residue, text.d);
    free(text.d);
}

static double ctime_s(const struct stat *st) {
    return (double)st->st_ctim.tv_sec + st->st_ctim.tv_nsec / 1e9;
}

static int dev_entry(const char *path, const struct stat *st, int flag, struct FTW *at) {
    (void)at;
    if (flag != FTW_NS && ctime_s(st) > sweep_since) add_residue("changed", path);
    return 0;
}

/* Lines past the header of /proc/sysvipc/<kind>: how many objects of that kind exist. */
static int ipc_objects(const char *kind) {
    char path[64], text[4096];
    snprintf(path, sizeof path, "/proc/sysvipc/%s", kind);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = 0;
    char *second = strchr(text, '\n');
    return second && second[1] != 0;
}

static int has_entries(const char *dir_path) {
    DIR *dir = opendir(dir_path);
    if (!dir) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(dir)))
        found = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(dir);
    return found;
}

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape_mount(char *s) {
    char *out = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '3' && p[2] && p[3]) {
            *out++ = (char)((p[1] - '0') << 6 | (p[2] - '0') << 3 | (p[3] - '0'));
            p += 3;
        } else {
            *out++ = *p;
        }
    }
    *out = 0;
}

static int under(const char *path, const char *top) {
    size_t n = strlen(top);
    return !strncmp(path, top, n) && (path[n] == '/' || path[n] == 0);
}

/* One mount of /proc/self/mountinfo: its tmpfs to empty, or its residue. */
static void sweep_mount(char *line, buf *tmpfs, size_t *ntmpfs) {
    char *rest = strstr(line, " - "), *fields[6], *save = NULL;
    if (!rest) return;
    *rest = 0;
    int n = 0;
    for (char *f = strtok_r(line, " ", &save); f && n < 6; f = strtok_r(NULL, " ", &save))
        fields[n++] = f;
    char *fstype = strtok_r(rest + 3, " \n", &save);
    if (n < 6 || !fstype) return;
    char *point = fields[4], *options = fields[5];
    unescape_mount(point);
    int read_only = !strncmp(options, "ro", 2) && (options[2] == ',' || options[2] == 0);
    if (read_only || under(point, "/proc") || under(point, "/sys")) return;
    struct stat st;
    if (!strcmp(point, "/dev")) {
        nftw("/dev", dev_entry, 16, FTW_PHYS | FTW_MOUNT);
    } else if (!strcmp(fstype, "tmpfs")) {
        if ((*ntmpfs)++) bputs(tmpfs, ",");
        bjstr(tmpfs, point);
    } else if (lstat(point, &st) == 0 && S_ISREG(st.st_mode) && ctime_s(&st) > sweep_since) {
        add_residue("changed", point);
    }
}

static void sweep(long long id, const jv *req) {
    if (getpid() != 1)
        return send_error(id, ENOTSUP, "the helper is not the container's init", NULL);
    sweep_since = jnum(req, "since", 0);
    size_t rounds = 0; /* kill(-1)s until none was left to signal */
    int left = 1;
    for (double deadline = now_s() + SWEEP_LIMIT_S; left && now_s() < deadline; rounds++) {
        kill(-1, SIGKILL);
        reap();
        left = !(kill(-1, 0) != 0 && errno == ESRCH);
        if (left) usleep(1000);
    }
    if (left) return send_error(id, EBUSY, "processes outlived SIGKILL", NULL);
    buf residue = {0}, tmpfs = {0};
    size_t ntmpfs = 0;
    sweep_residue = &residue;
    sweep_nresidue = 0;
    FILE *mounts = fopen("/proc/self/mountinfo", "re");
    if (!mounts) add_residue("unreadable", "/proc/self/mountinfo");
    char *line = NULL; /* a line of any length: overlay's lists every lower layer */
    size_t capacity = 0;
    while (mounts && getline(&line, &capacity, mounts) > 0) sweep_mount(line, &tmpfs, &ntmpfs);
    free(line);
    if (mounts) fclose(mounts);
    if (ipc_objects("shm") || ipc_objects("sem") || ipc_objects("msg"))
        add_residue("System V IPC objects", NULL);
    if (has_entries("/dev/mqueue")) add_residue("POSIX message queues", NULL);
    buf b = head(id, "done");
    bprintf(&b, ",\"rounds\":%zu,\"tmpfs\":[", rounds);
    if (tmpfs.n) bput(&b, tmpfs.d, tmpfs.n);
    bputs(&b, "],\"residue\":[");
    if (residue.n) bput(&b, residue.d, residue.n);
    bputs(&b, "]");
    send_frame(&b, NULL, 0);
    free(tmpfs.d);
    free(residue.d);
}

/* Not dumpable: no ptrace, /proc/<pid>/mem or /proc/<pid>/fd of the helper for a process
 * without CAP_SYS_PTRACE. The commands it starts are dumpable again once they exec. */
static void harden_helper(void) { prctl(PR_SET_DUMPABLE, 0, 0, 0, 0); }
