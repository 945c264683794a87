/*
 * sudo for the workstation profile: a client of the helper (elevate.c), not a setuid program.
 *
 * It hands the helper its stdin, stdout and stderr (SCM_RIGHTS) with the command, its working
 * directory and the environment sudo would give it (the caller's, with HOME, USER, LOGNAME,
 * SHELL of root, a secure PATH and the SUDO_* variables), then waits for the command's wait
 * status and exits with it (128 + the signal when it was killed). Options: -u root (no other
 * user), -E, -H, -n, -S, -k, -v, -l, -i and -s (a login or plain root shell), --.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define ELEVATE_NAME "/run/sudo.sock"
#define SECURE_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

extern char **environ;

static char *msg;
static size_t len, cap;

static void put(const char *word) {
    size_t n = strlen(word) + 1;
    if (len + n > cap) {
        cap = (len + n) * 2;
        msg = realloc(msg, cap);
        if (!msg) exit(1);
    }
    memcpy(msg + len, word, n);
    len += n;
}

static void putenv_pair(const char *name, const char *value) {
    char line[4096];
    snprintf(line, sizeof line, "%s=%s", name, value);
    put(line);
}

static int usage(void) {
    fprintf(stderr, "usage: sudo [-EHnS] [-u user] [-i | -s] [command [arg ...]]\n");
    return 1;
}

int main(int argc, char **argv) {
    int shell = 0, login = 0, i = 1;
    for (; i < argc && argv[i][0] == '-' && argv[i][1]; i++) {
        if (!strcmp(argv[i], "--")) {
            i++;
            break;
        }
        for (const char *o = argv[i] + 1; *o; o++) {
            if (*o == 'u') {
                const char *user = o[1] ? o + 1 : (i + 1 < argc ? argv[++i] : NULL);
                if (!user) return usage();
                if (strcmp(user, "root") && strcmp(user, "#0")) {
                    fprintf(stderr, "sudo: unknown user %s\n", user);
                    return 1;
                }
                break;
            }
            if (*o == 'i') login = 1;
            else if (*o == 's') shell = 1;
            else if (*o == 'k' || *o == 'K' || *o == 'v') {
                if (i + 1 >= argc) return 0;
            } else if (*o == 'l') {
                printf("User %s may run the following commands:\n    (ALL : ALL) NOPASSWD: ALL\n",
                       getenv("USER") ? getenv("USER") : "root");
                return 0;
            } else if (!strchr("EHnSAbP", *o)) return usage();
        }
    }
    char count[32], cwd[4096];
    const char *words[] = {"/bin/bash", login ? "-l" : NULL};
    int nwords = argc - i;
    if (!nwords && !shell && !login) return usage();
    if (!getcwd(cwd, sizeof cwd)) strcpy(cwd, "/");
    if (nwords && (shell || login)) {
        /* sudo -s/-i CMD: the shell runs the command line */
        snprintf(count, sizeof count, "%d", login ? 4 : 3);
        put(count);
        put(login ? "/root" : cwd);
        put("/bin/bash");
        if (login) put("-l");
        put("-c");
        size_t total = 1;
        for (int k = i; k < argc; k++) total += strlen(argv[k]) + 1;
        char *line = calloc(total, 1);
        if (!line) return 1;
        for (int k = i; k < argc; k++) {
            if (k > i) strcat(line, " ");
            strcat(line, argv[k]);
        }
        put(line);
    } else if (!nwords) {
        put(login ? "2" : "1");
        put(login ? "/root" : cwd);
        for (int k = 0; k < 1 + login; k++) put(words[k]);
    } else {
        snprintf(count, sizeof count, "%d", nwords);
        put(count);
        put(cwd);
        for (int k = i; k < argc; k++) put(argv[k]);
    }
    static const char *reset[] = {"HOME", "USER", "LOGNAME", "SHELL", "PATH", "MAIL", "SUDO_USER",
                                  "SUDO_UID", "SUDO_GID", "SUDO_COMMAND", NULL};
    for (char **e = environ; *e; e++) {
        size_t n = strcspn(*e, "=");
        int dropped = 0;
        for (const char **r = reset; *r && !dropped; r++)
            dropped = strlen(*r) == n && !strncmp(*e, *r, n);
        if (!dropped) put(*e);
    }
    char number[32];
    putenv_pair("HOME", "/root");
    putenv_pair("USER", "root");
    putenv_pair("LOGNAME", "root");
    putenv_pair("SHELL", "/bin/bash");
    putenv_pair("PATH", SECURE_PATH);
    putenv_pair("SUDO_USER", getenv("USER") ? getenv("USER") : "root");
    snprintf(number, sizeof number, "%u", (unsigned)getuid());
    putenv_pair("SUDO_UID", number);
    snprintf(number, sizeof number, "%u", (unsigned)getgid());
    putenv_pair("SUDO_GID", number);
    putenv_pair("SUDO_COMMAND", nwords ? argv[i] : "/bin/bash");

    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t name = strlen(ELEVATE_NAME);
    memcpy(addr.sun_path + 1, ELEVATE_NAME, name);
    socklen_t size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + name);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, size)) {
        fprintf(stderr, "sudo: unable to reach the authentication service: %s\n", strerror(errno));
        return 1;
    }
    int stdio[3] = {0, 1, 2};
    char control[CMSG_SPACE(sizeof stdio)] = {0};
    struct iovec iov = {msg, len};
    struct msghdr out = {.msg_iov = &iov, .msg_iovlen = 1};
    out.msg_control = control;
    out.msg_controllen = sizeof control;
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&out);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof stdio);
    memcpy(CMSG_DATA(cmsg), stdio, sizeof stdio);
    if (sendmsg(fd, &out, MSG_NOSIGNAL) < 0) {
        fprintf(stderr, "sudo: %s\n", strerror(errno));
        return 1;
    }
    int status;
    ssize_t got;
    while ((got = recv(fd, &status, sizeof status, 0)) < 0 && errno == EINTR) {
    }
    if (got != (ssize_t)sizeof status) return 1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}
