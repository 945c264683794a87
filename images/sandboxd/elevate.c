/*
 * sudo for the workstation profile, served by the helper (included by sandboxd.c).
 *
 * With --sudo the helper listens on the abstract unix socket ELEVATE_NAME (SOCK_SEQPACKET).
 * The `sudo` client (sudo.c, no setuid bit: no-new-privileges and the dropped capabilities
 * stay) sends one message: its stdin, stdout and stderr as SCM_RIGHTS, and the payload
 * "argc\0cwd\0arg...\0env...\0". The helper, root already, forks: the child starts a session
 * of its own, takes the three descriptors, changes to cwd and execs argv as root with that
 * environment, with oom_score_adj 1000 like every exec. The helper answers with the wait status
 * (4 bytes, host order) when the child exits; when the client goes away first (killed by a
 * timeout or a cancel), the child's process group is killed. Anyone in the sandbox may connect,
 * as anyone may run sudo without a password on a developer's machine: it gives the agent what
 * the default profile gives it anyway, root inside the container.
 */
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#define ELEVATE_NAME "/run/sudo.sock"
#define ELEVATE_MAX (256 * 1024)

typedef struct elevated {
    pid_t pid;
    int fd;
    struct elevated *next;
} elevated;

static int elevate_fd = -1;
static elevated *elevateds;
static size_t nelevate_fds;

static void elevate_listen(void) {
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(ELEVATE_NAME);
    memcpy(addr.sun_path + 1, ELEVATE_NAME, len);
    socklen_t size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, size) || listen(fd, 64)) {
        diag("sudo socket: %s", strerror(errno));
        if (fd >= 0) close(fd);
        return;
    }
    elevate_fd = fd;
}

static size_t elevate_nfds(void) {
    size_t n = elevate_fd >= 0;
    for (elevated *e = elevateds; e; e = e->next) n += e->fd >= 0;
    return n;
}

static size_t elevate_fill(struct pollfd *fds) {
    size_t n = 0;
    if (elevate_fd >= 0) fds[n++] = (struct pollfd){elevate_fd, POLLIN, 0};
    for (elevated *e = elevateds; e; e = e->next)
        if (e->fd >= 0) fds[n++] = (struct pollfd){e->fd, POLLIN, 0};
    nelevate_fds = n;
    return n;
}

static void elevate_child(int stdio[3], char *payload, size_t len) {
    setsid();
    for (int i = 0; i < 3; i++)
        if (dup2(stdio[i], i) < 0) _exit(126);
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)!write(fd, "1000", 4);
        close(fd);
    }
    size_t cap = 16, nwords = 0;
    char **words = xmalloc(cap * sizeof *words);
    for (size_t off = 0; off < len; off += strlen(payload + off) + 1) {
        if (nwords + 1 >= cap) words = xrealloc(words, (cap *= 2) * sizeof *words);
        words[nwords++] = payload + off;
    }
    words[nwords] = NULL;
    long argc = nwords ? strtol(words[0], NULL, 10) : 0;
    if (argc < 1 || (size_t)argc + 2 > nwords) _exit(126);
    char **argv = xmalloc(((size_t)argc + 1) * sizeof *argv);
    memcpy(argv, words + 2, (size_t)argc * sizeof *argv);
    argv[argc] = NULL;
    if (chdir(words[1])) (void)!chdir("/");
    execvpe(argv[0], argv, words + 2 + argc);
    dprintf(2, "sudo: %s: command not found\n", argv[0]);
    _exit(1);
}

static void elevate_accept(void) {
    int fd = accept4(elevate_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) return;
    char *payload = xmalloc(ELEVATE_MAX + 1);
    char control[CMSG_SPACE(3 * sizeof(int))];
    struct iovec iov = {payload, ELEVATE_MAX};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    struct cmsghdr *cmsg = got > 0 ? CMSG_FIRSTHDR(&msg) : NULL;
    if (!cmsg || cmsg->cmsg_type != SCM_RIGHTS || cmsg->cmsg_len != CMSG_LEN(3 * sizeof(int)) ||
        (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
        close(fd);
        free(payload);
        return;
    }
    int stdio[3];
    memcpy(stdio, CMSG_DATA(cmsg), sizeof stdio);
    payload[got] = 0;
    pid_t pid = fork();
    if (pid == 0) elevate_child(stdio, payload, (size_t)got);
    for (int i = 0; i < 3; i++) close(stdio[i]);
    free(payload);
    if (pid < 0) {
        close(fd);
        return;
    }
    elevated *e = xmalloc(sizeof *e);
    *e = (elevated){pid, fd, elevateds};
    elevateds = e;
}

/* Serve what poll reported on the descriptors elevate_fill added (in the same order). */
static void elevate_service(const struct pollfd *fds) {
    size_t k = 0;
    elevated *first = elevateds; /* accepted below: not in fds yet */
    if (elevate_fd >= 0 && k < nelevate_fds && fds[k++].revents) elevate_accept();
    for (elevated *e = first; e && k < nelevate_fds; e = e->next) {
        if (e->fd < 0 || !fds[k++].revents) continue;
        kill(-e->pid, SIGKILL); /* the client went away: so does what it asked for */
        kill(e->pid, SIGKILL);
        close(e->fd);
        e->fd = -1;
    }
}

/* A child exited: when it was one of ours, tell its client. */
static void elevate_reaped(pid_t pid, int status) {
    for (elevated **p = &elevateds; *p; p = &(*p)->next) {
        elevated *e = *p;
        if (e->pid != pid) continue;
        if (e->fd >= 0) {
            (void)!send(e->fd, &status, sizeof status, MSG_NOSIGNAL | MSG_DONTWAIT);
            close(e->fd);
        }
        *p = e->next;
        free(e);
        return;
    }
}
