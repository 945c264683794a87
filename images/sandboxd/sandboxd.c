/*
 * envfarm-sandboxd: the helper envfarm runs inside every Docker sandbox.
 *
 * It runs as the container's init (PID 1, as root, not dumpable) with its stdin and
 * stdout attached to envfarm through the engine, so a tool call costs one round trip over an
 * open stream instead of a `docker exec`. Its stderr carries its own diagnostics only. It is
 * linked statically and calls no NSS function (it reads /etc/passwd and /etc/group itself), so
 * it runs in any image, with or without a libc, a shell or a network.
 *
 * Protocol (the same text heads envfarm/sandbox/docker/channel.py). Both directions carry frames:
 *
 *     u32 header_len | u32 payload_len | header (a JSON object, UTF-8) | payload (raw bytes)
 *
 * lengths big endian, header_len 1..1 MiB, payload_len 0..16 MiB. Every header has an integer
 * "id" chosen by envfarm; requests carry "op", responses "type" and the id of their request.
 *
 *   ping        {}                                  -> pong {version, pid}
 *   exec        {command | argv, cwd?, env?, user?, set_home?, timeout_s?, cap?, log?}
 *                                                   -> stdout* stderr* (payload: output bytes)
 *                                                      exit {exit_code, signal, timed_out,
 *                                                            stdout_truncated, stderr_truncated,
 *                                                            duration_s}
 *   read_file   {path, user?}                       -> data* (payload: file bytes) done {size}
 *   write_file  {path, mode, mkdir, user?, eof}     -> done {size}   (payload: first bytes;
 *   write_data  {eof}                                  more in write_data frames until eof)
 *   cancel      {}                                  -> nothing: kills the exec, drops the transfer
 *   reclaim_processes {min_free?}                   -> done {tasks, limit, killed}
 *   free_reserve {}                                 -> done {freed}
 *   walk        {path, out}                         -> done {entries, bytes}
 *   remove      {paths, contents?}                  -> done {removed, failed}
 *   sweep       {since}                             -> done {rounds, tmpfs, residue}
 *   any                                             -> error {errno, message, path?} instead
 *
 * Requests are served concurrently: execs run side by side, reads send one chunk per turn of
 * the loop, so one large transfer does not stall the rest. Responses of one id arrive in order.
 *
 * exec: fork, setsid (own session and process group), switch user (setgroups, setgid, setuid)
 * when asked, chdir, execve `/bin/bash -c command` (`/bin/sh` when there is no bash) or argv
 * through PATH. stdin is /dev/null; stdout and stderr are pipes read with poll, or, with `log`,
 * both appended to that file (opened as root, parents created), never onto this stream: how
 * envfarm runs the image's entrypoint as a supervised process whose exit it hears. Up to `cap`
 * bytes per stream are forwarded, the rest is read and dropped (truncated=true). The exec is
 * done when its main process exits: what its pipes hold at that moment is sent, and processes
 * it left in the background keep running, their later output read and dropped. On timeout or
 * cancel the helper stops (SIGSTOP) the process group, every process of the session and every
 * descendant, rescans until nothing new turns up, then SIGKILLs them all; a process that left
 * with setsid and whose parent was already gone has been re-parented to the helper and is not
 * caught (only `sweep` catches everything). As init, the helper reaps every orphan. Failures
 * to set up the command (unknown user, missing directory, fork) end it with exit code 126 and
 * a message on stderr, 127 when the program does not exist, as `docker exec` does.
 *
 * Files: read_file and write_file act as `user` when given (its groups, then its effective gid
 * and uid, the real and saved ids staying root so the helper can switch back; setfsuid would
 * do, but gVisor does not implement it), so permissions are those of the user; as root
 * otherwise. write_file creates missing parents
 * (0755) when mkdir is true and writes a temporary file in the target directory, then renames
 * it over the target: readers never see a partial file.
 *
 * Ending: EOF on stdin (envfarm went away) kills every exec and exits 0. SIGTERM, SIGINT,
 * SIGHUP or SIGQUIT (what the engine sends to stop the container) refuse new requests, let
 * running execs finish for up to two seconds so their results are delivered, then exit
 * 128+signal, which stops the container.
 *
 * The agent's excess is its own: every exec runs with oom_score_adj 1000, so the kernel's OOM
 * killer takes a command before the helper, and with `--memory-limit-mb N` each exec's address
 * space is capped at N MiB (RLIMIT_AS): under gVisor, where a sandbox over its cgroup limit is
 * killed whole, a process that asks for more gets ENOMEM instead and the helper lives on.
 * Processes likewise: with `--nproc-limit N` (gVisor, whose sandbox dies when its host threads
 * reach the container's pids limit) each exec's user may have N processes (RLIMIT_NPROC), and
 * `reclaim_processes` kills what finished commands left running once the container is within
 * `min_free` of `--pids-limit`, so the verifier can still start. Disk likewise: with
 * `--reserve-mb N` the helper holds N MiB of the container's disk in a file no path names
 * (an O_TMPFILE, or one unlinked at once: the agent cannot find it, and /proc/1/fd is closed
 * to it, the helper being undumpable), taken when it starts; `free_reserve` gives it back, so
 * the tests can be written where the agent filled the disk to its quota.
 *
 * walk and remove are the helper's own file system work, for grading in the agent's container
 * (envfarm/grading/inplace.py): there the image's find and rm may be the agent's. walk writes
 * every entry of the file system `path` lies on (never crossing a mount) to `out` as records
 * "<type> <ctime> <path relative to />" each ended by a NUL, type as find's %y, ctime as
 * seconds.nanoseconds; remove deletes each path with everything below it (each of `contents`:
 * what is below it, the path kept), never following a symlink and never descending into a
 * mount. Both run as root, in the loop: nothing else runs in the container when grading asks
 * for them. sweep (sweep.c) kills every other process of the container, for grading in place.
 *
 * Options come from argv and from the environment variable INIT_OPTS (the same words, space
 * separated), which the helper removes from its environment before it starts anything: the
 * workstation profile starts it as /sbin/init with no arguments, so its command line tells
 * nothing. --hide-container removes /.dockerenv, --sudo serves the sudo client (elevate.c),
 * --tty gives each exec a terminal as stdin (open_tty; docs/sandbox.md, the workstation profile),
 * --dress USER adds a laptop's devices, network interfaces and desktop processes (dress.c),
 * --drop-route removes the default route of a container without network (route.c).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROTOCOL_VERSION 1
#define MAX_HEADER (1u << 20)
#define MAX_PAYLOAD (16u << 20)
#define OUTPUT_CHUNK (64 * 1024)
#define FILE_CHUNK (256 * 1024)
#define DEFAULT_CAP (4u << 20)
#define TERM_GRACE_S 2.0
#define MAX_GROUPS 256
#define OPTIONS_ENV "INIT_OPTS"

extern char **environ;

/* ---------------------------------------------------------------- small utilities */

static void diag(const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n > sizeof line - 2) n = sizeof line - 2;
    line[n++] = '\n';
    (void)!write(2, "sandboxd: ", 10);
    (void)!write(2, line, (size_t)n);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        diag("out of memory");
        _exit(3);
    }
    return p;
}

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) {
        diag("out of memory");
        _exit(3);
    }
    return p;
}

static char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void set_nonblocking(int fd) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

/* A growable byte buffer, used for JSON output and the input stream. */
typedef struct {
    char *d;
    size_t n, cap;
} buf;

static void breserve(buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra) cap *= 2;
    b->d = xrealloc(b->d, cap);
    b->cap = cap;
}

static void bput(buf *b, const void *p, size_t n) {
    breserve(b, n);
    memcpy(b->d + b->n, p, n);
    b->n += n;
}

static void bputs(buf *b, const char *s) { bput(b, s, strlen(s)); }

static void bprintf(buf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) bput(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static void bjstr(buf *b, const char *s) {
    bputs(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            char esc[2] = {'\\', (char)*p};
            bput(b, esc, 2);
        } else if (*p < 0x20) {
            bprintf(b, "\\u%04x", *p);
        } else {
            bput(b, p, 1);
        }
    }
    bputs(b, "\"");
}

/* ---------------------------------------------------------------- JSON (headers only) */

enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

typedef struct jv {
    int type;
    int boolean;
    double num;
    char *str; /* J_STR: NUL-terminated; J_OBJ member: the key */
    size_t len;
    struct jv *kids; /* J_ARR / J_OBJ members */
    size_t n;
} jv;

typedef struct {
    const char *p, *end;
    const char *err;
} jparser;

static void jfree(jv *v) {
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) jfree(&v->kids[i]);
    free(v->kids);
    free(v->str);
    v->kids = NULL;
    v->str = NULL;
    v->n = 0;
}

static void jskip(jparser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static void put_utf8(buf *b, unsigned cp) {
    unsigned char o[4];
    size_t n;
    if (cp >= 0xDC80 && cp <= 0xDCFF) { /* Python's surrogateescape: one raw byte */
        o[0] = (unsigned char)(cp - 0xDC00);
        n = 1;
    } else if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        o[0] = (unsigned char)(0xF0 | (cp >> 18));
        o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    bput(b, o, n);
}

static char *jparse_string(jparser *ps, size_t *len) {
    buf b = {0};
    ps->p++; /* opening quote */
    while (ps->p < ps->end && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c != '\\') {
            bput(&b, ps->p++, 1);
            continue;
        }
        if (ps->end - ps->p < 2) break;
        char e = ps->p[1];
        ps->p += 2;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (simple && e) {
            static const char out[] = "\"\\/\b\f\n\r\t";
            bput(&b, &out[simple - "\"\\/bfnrt"], 1);
            continue;
        }
        unsigned cp, lo;
        if (e != 'u' || ps->end - ps->p < 4 || hex4(ps->p, &cp)) {
            ps->err = "bad escape in a JSON string";
            free(b.d);
            return NULL;
        }
        ps->p += 4;
        if (cp >= 0xD800 && cp < 0xDC00 && ps->end - ps->p >= 6 && ps->p[0] == '\\' &&
            ps->p[1] == 'u' && !hex4(ps->p + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            ps->p += 6;
        }
        put_utf8(&b, cp);
    }
    if (ps->p >= ps->end) {
        ps->err = "unterminated JSON string";
        free(b.d);
        return NULL;
    }
    ps->p++;
    *len = b.n;
    bput(&b, "", 1);
    return b.d;
}

static int jparse_value(jparser *ps, jv *out, int depth) {
    memset(out, 0, sizeof *out);
    jskip(ps);
    if (ps->p >= ps->end || depth > 32) {
        ps->err = depth > 32 ? "JSON nested too deeply" : "unexpected end of JSON";
        return -1;
    }
    char c = *ps->p;
    if (c == '"') {
        out->type = J_STR;
        out->str = jparse_string(ps, &out->len);
        return out->str ? 0 : -1;
    }
    if (c == '{' || c == '[') {
        int is_obj = c == '{';
        out->type = is_obj ? J_OBJ : J_ARR;
        ps->p++;
        size_t cap = 0;
        for (;;) {
            jskip(ps);
            if (ps->p < ps->end && *ps->p == (is_obj ? '}' : ']') && out->n == 0) {
                ps->p++;
                return 0;
            }
            if (out->n == cap) {
                cap = cap ? cap * 2 : 8;
                out->kids = xrealloc(out->kids, cap * sizeof(jv));
            }
            jv *kid = &out->kids[out->n];
            char *key = NULL;
            if (is_obj) {
                size_t klen;
                if (ps->p >= ps->end || *ps->p != '"' || !(key = jparse_string(ps, &klen))) {
                    if (!ps->err) ps->err = "expected a key in a JSON object";
                    return -1;
                }
                jskip(ps);
                if (ps->p >= ps->end || *ps->p != ':') {
                    free(key);
                    ps->err = "expected ':' in a JSON object";
                    return -1;
                }
                ps->p++;
            }
            if (jparse_value(ps, kid, depth + 1)) {
                free(key);
                jfree(kid);
                return -1;
            }
            if (is_obj) { /* an object member keeps its key in a wrapper node */
                jv member = {.type = J_OBJ, .str = key, .kids = xmalloc(sizeof(jv)), .n = 1};
                member.kids[0] = *kid;
                *kid = member;
            }
            out->n++;
            jskip(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == (is_obj ? '}' : ']')) {
                ps->p++;
                return 0;
            }
            ps->err = "expected ',' or a closing bracket in JSON";
            return -1;
        }
    }
    if (!strncmp(ps->p, "true", 4) || !strncmp(ps->p, "false", 5)) {
        out->type = J_BOOL;
        out->boolean = c == 't';
        ps->p += out->boolean ? 4 : 5;
        return 0;
    }
    if (!strncmp(ps->p, "null", 4)) {
        out->type = J_NULL;
        ps->p += 4;
        return 0;
    }
    char *stop;
    out->type = J_NUM;
    out->num = strtod(ps->p, &stop);
    if (stop == ps->p) {
        ps->err = "unexpected character in JSON";
        return -1;
    }
    ps->p = stop;
    return 0;
}

static jv *jget(const jv *obj, const char *key) {
    if (!obj || obj->type != J_OBJ) return NULL;
    for (size_t i = 0; i < obj->n; i++)
        if (obj->kids[i].str && !strcmp(obj->kids[i].str, key)) return &obj->kids[i].kids[0];
    return NULL;
}

static const char *jstr(const jv *obj, const char *key) {
    jv *v = jget(obj, key);
    return v && v->type == J_STR ? v->str : NULL;
}

static double jnum(const jv *obj, const char *key, double fallback) {
    jv *v = jget(obj, key);
    return v && v->type == J_NUM ? v->num : fallback;
}

static int jbool(const jv *obj, const char *key) {
    jv *v = jget(obj, key);
    return v && v->type == J_BOOL && v->boolean;
}

/* ---------------------------------------------------------------- output frames */

static void shutdown_now(int code);
static void reap(void);

static void write_all(const struct iovec *parts, int count) {
    struct iovec iov[3];
    memcpy(iov, parts, (size_t)count * sizeof *iov);
    struct iovec *cur = iov;
    while (count > 0) {
        ssize_t n = writev(1, cur, count);
        if (n < 0 && errno == EAGAIN) {
            struct pollfd out = {1, POLLOUT, 0};
            poll(&out, 1, -1);
            continue;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            shutdown_now(0); /* envfarm closed the stream */
        }
        while (count > 0 && (size_t)n >= cur->iov_len) {
            n -= (ssize_t)cur->iov_len;
            cur++;
            count--;
        }
        if (count > 0) {
            cur->iov_base = (char *)cur->iov_base + n;
            cur->iov_len -= (size_t)n;
        }
    }
}

static void send_frame(buf *header, const void *payload, size_t len) {
    bputs(header, "}");
    unsigned char prefix[8];
    uint32_t h = (uint32_t)header->n, p = (uint32_t)len;
    for (int i = 0; i < 4; i++) {
        prefix[i] = (unsigned char)(h >> (24 - 8 * i));
        prefix[4 + i] = (unsigned char)(p >> (24 - 8 * i));
    }
    struct iovec iov[3] = {
        {prefix, 8}, {header->d, header->n}, {(void *)payload, len}};
    write_all(iov, len ? 3 : 2);
    free(header->d);
    header->d = NULL;
    header->n = header->cap = 0;
}

/* Start a response header; add fields with bprintf/bjstr, then send_frame closes it. */
static buf head(long long id, const char *type) {
    buf b = {0};
    bprintf(&b, "{\"id\":%lld,\"type\":\"%s\"", id, type);
    return b;
}

static void send_error(long long id, int err, const char *message, const char *path) {
    buf b = head(id, "error");
    bprintf(&b, ",\"errno\":%d,\"message\":", err);
    bjstr(&b, message ? message : strerror(err));
    if (path) {
        bputs(&b, ",\"path\":");
        bjstr(&b, path);
    }
    send_frame(&b, NULL, 0);
}

/* ---------------------------------------------------------------- users */

typedef struct {
    uid_t uid;
    gid_t gid;
    char home[PATH_MAX];
    gid_t groups[MAX_GROUPS];
    int ngroups;
} ident;

static int parse_id(const char *s, unsigned long *out) {
    if (!*s) return -1;
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || v > 0x7fffffffUL) return -1;
    *out = v;
    return 0;
}

/* Split a colon-separated line in place; returns the number of fields. */
static int split_fields(char *line, char **fields, int max) {
    int n = 0;
    line[strcspn(line, "\n")] = 0;
    while (n < max) {
        fields[n++] = line;
        char *colon = strchr(line, ':');
        if (!colon) break;
        *colon = 0;
        line = colon + 1;
    }
    return n;
}

static int is_member(char *members, const char *name) {
    for (char *tok = strtok(members, ","); tok; tok = strtok(NULL, ","))
        if (!strcmp(tok, name)) return 1;
    return 0;
}

/* Resolve "user[:group]" (names or ids) the way docker exec does. */
static int resolve_user(const char *spec, ident *id, char *err, size_t errlen) {
    char user[256], *group = NULL, pwname[256] = "";
    snprintf(user, sizeof user, "%s", spec);
    if ((group = strchr(user, ':'))) *group++ = 0;
    unsigned long num;
    int numeric = parse_id(user, &num) == 0, found = 0;
    memset(id, 0, sizeof *id);
    strcpy(id->home, "/");
    id->uid = numeric ? (uid_t)num : 0;
    char line[4096], *f[7];
    FILE *fp = fopen("/etc/passwd", "re");
    while (fp && !found && fgets(line, sizeof line, fp)) {
        if (split_fields(line, f, 7) < 7) continue;
        unsigned long uid, gid;
        if (parse_id(f[2], &uid) || parse_id(f[3], &gid)) continue;
        if (numeric ? uid == num : !strcmp(f[0], user)) {
            found = 1;
            id->uid = (uid_t)uid;
            id->gid = (gid_t)gid;
            snprintf(id->home, sizeof id->home, "%s", f[5]);
            snprintf(pwname, sizeof pwname, "%s", f[0]);
        }
    }
    if (fp) fclose(fp);
    if (!found && !numeric) {
        snprintf(err, errlen, "unable to find user %s: no matching entries in passwd file", user);
        return -1;
    }
    int group_found = !group;
    if (group && parse_id(group, &num) == 0) {
        id->gid = (gid_t)num;
        group_found = 1;
    }
    id->groups[id->ngroups++] = id->gid;
    fp = fopen("/etc/group", "re");
    while (fp && fgets(line, sizeof line, fp)) {
        if (split_fields(line, f, 4) < 4) continue;
        unsigned long gid;
        if (parse_id(f[2], &gid)) continue;
        if (group && !group_found && !strcmp(f[0], group)) {
            id->gid = id->groups[0] = (gid_t)gid;
            group_found = 1;
        } else if (!group && *pwname && is_member(f[3], pwname) && id->ngroups < MAX_GROUPS &&
                   (gid_t)gid != id->gid) {
            id->groups[id->ngroups++] = (gid_t)gid;
        }
    }
    if (fp) fclose(fp);
    if (!group_found) {
        snprintf(err, errlen, "unable to find group %s: no matching entries in group file", group);
        return -1;
    }
    return 0;
}

/* File access as another user: groups and effective ids only (real and saved ids stay the
 * helper's, so the user's processes cannot signal it meanwhile), restored by fs_restore. */
static gid_t saved_groups[MAX_GROUPS];
static int saved_ngroups;

static void fs_restore(void) {
    if (setresuid((uid_t)-1, getuid(), (uid_t)-1) || setresgid((gid_t)-1, getgid(), (gid_t)-1) ||
        setgroups((size_t)saved_ngroups, saved_groups)) {
        diag("cannot switch back to the helper's own ids: %s", strerror(errno));
        shutdown_now(1);
    }
}

static int fs_become(const char *user, long long id, const char *path) {
    if (!user || !*user) return 0;
    ident who;
    char err[512];
    if (resolve_user(user, &who, err, sizeof err)) {
        send_error(id, EINVAL, err, path);
        return -1;
    }
    if (setgroups((size_t)who.ngroups, who.groups) ||
        setresgid((gid_t)-1, who.gid, (gid_t)-1) || setresuid((uid_t)-1, who.uid, (uid_t)-1)) {
        int failed = errno;
        fs_restore();
        send_error(id, failed, "cannot switch to the user", path);
        return -1;
    }
    return 1;
}

/* ---------------------------------------------------------------- exec jobs */

typedef struct job {
    long long id;
    pid_t pid;
    int fd[2]; /* read ends of stdout and stderr; -1 once closed */
    size_t sent[2], cap;
    int truncated[2];
    int exited, status, timed_out;
    int supervised; /* started with `log`: the image's entrypoint, never reclaimed */
    int tty;        /* the master of the pty that is the command's stdin (--tty); -1: none */
    double started, deadline; /* deadline 0: none */
    struct job *next;
} job;

static job *jobs;
static int *drains; /* pipes of finished execs still held open by their background processes */
static size_t ndrains, drains_cap;

static void add_drain(int fd) {
    if (ndrains == drains_cap) {
        drains_cap = drains_cap ? drains_cap * 2 : 16;
        drains = xrealloc(drains, drains_cap * sizeof *drains);
    }
    drains[ndrains++] = fd;
}

typedef struct {
    pid_t pid, ppid, pgid, sid;
    int marked;
    long threads;
} proc_info;

static int read_proc_stat(pid_t pid, proc_info *out) {
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return -1;
    text[n] = 0;
    char *close_paren = strrchr(text, ')'); /* the command name may contain anything */
    int ppid, pgid, sid;
    long threads = 1;
    int got = close_paren ? sscanf(close_paren + 1,
                                   " %*c %d %d %d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d"
                                   " %*d %*d %ld", &ppid, &pgid, &sid, &threads)
                          : 0;
    if (got < 3) return -1;
    *out = (proc_info){pid, ppid, pgid, sid, 0, threads > 0 ? threads : 1};
    return 0;
}

static int contains(const pid_t *pids, size_t n, pid_t pid) {
    for (size_t i = 0; i < n; i++)
        if (pids[i] == pid) return 1;
    return 0;
}

/* Kill the process groups and sessions of `roots` and every descendant of them (and each
 * root itself when `with_roots`). Everything found is stopped first and the scan repeated until
 * it finds nothing new, so no process can fork away or be re-parented to init (its parent
 * dying) between the scan and the kill. Returns how many processes were killed. */
static size_t kill_trees(const pid_t *roots, size_t nroots, int with_roots) {
    pid_t *doomed = NULL;
    size_t ndoomed = 0, cap = 0;
    if (with_roots)
        for (size_t r = 0; r < nroots; r++) kill(-roots[r], SIGSTOP);
    for (int pass = 0, found = 1; found && pass < 16; pass++) {
        DIR *dir = opendir("/proc");
        if (!dir) break;
        proc_info *ps = NULL;
        size_t n = 0, ps_cap = 0;
        struct dirent *e;
        while ((e = readdir(dir))) {
            unsigned long pid;
            if (parse_id(e->d_name, &pid)) continue;
            if (n == ps_cap) ps = xrealloc(ps, (ps_cap = ps_cap ? ps_cap * 2 : 256) * sizeof *ps);
            if (read_proc_stat((pid_t)pid, &ps[n]) == 0) n++;
        }
        closedir(dir);
        for (size_t i = 0; i < n; i++)
            ps[i].marked = contains(roots, nroots, ps[i].pgid) ||
                           contains(roots, nroots, ps[i].sid) ||
                           (with_roots && contains(roots, nroots, ps[i].pid)) ||
                           contains(doomed, ndoomed, ps[i].pid);
        for (int changed = 1; changed;) {
            changed = 0;
            for (size_t i = 0; i < n; i++)
                for (size_t j = 0; !ps[i].marked && j < n; j++)
                    if (ps[j].marked && ps[j].pid == ps[i].ppid) ps[i].marked = changed = 1;
        }
        found = 0;
        for (size_t i = 0; i < n; i++) {
            pid_t pid = ps[i].pid;
            if (!ps[i].marked || pid == getpid() || pid == 1 || contains(doomed, ndoomed, pid))
                continue;
            if (ndoomed == cap)
                doomed = xrealloc(doomed, (cap = cap ? cap * 2 : 64) * sizeof *doomed);
            doomed[ndoomed++] = pid;
            kill(pid, SIGSTOP);
            found = 1;
        }
        free(ps);
    }
    if (with_roots)
        for (size_t r = 0; r < nroots; r++) kill(-roots[r], SIGKILL);
    for (size_t i = 0; i < ndoomed; i++) kill(doomed[i], SIGKILL);
    free(doomed);
    return ndoomed;
}

static void kill_tree(pid_t root) { kill_trees(&root, 1, 1); }

/* The sessions of finished commands (each exec is a session of its own): what a command left
 * running in the background lives in one of them, or descends from a process that did. */
static pid_t *finished_sessions;
static size_t nfinished_sessions, finished_sessions_cap;

static void remember_session(pid_t sid) {
    if (contains(finished_sessions, nfinished_sessions, sid)) return;
    if (nfinished_sessions == finished_sessions_cap) {
        finished_sessions_cap = finished_sessions_cap ? finished_sessions_cap * 2 : 64;
        finished_sessions = xrealloc(finished_sessions, finished_sessions_cap * sizeof(pid_t));
    }
    finished_sessions[nfinished_sessions++] = sid;
}

static long pids_limit; /* the container's process limit (--pids-limit); 0: unknown */

/* Tasks (threads) of every process visible here: what pids.max counts. */
static long count_tasks(void) {
    DIR *dir = opendir("/proc");
    if (!dir) return -1;
    long tasks = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        unsigned long pid;
        proc_info info;
        if (!parse_id(e->d_name, &pid) && read_proc_stat((pid_t)pid, &info) == 0)
            tasks += info.threads;
    }
    closedir(dir);
    return tasks;
}

/* Signals the helper catches or ignores; an exec gets them back at their defaults. */
static const int handled_signals[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE};
static volatile sig_atomic_t term_signal; /* the signal that asked us to stop; 0 while running */

static void child_fail(int code, const char *fmt, const char *arg) {
    char msg[PATH_MAX + 256];
    int n = snprintf(msg, sizeof msg, fmt, arg, strerror(errno));
    if (n > 0) (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(code);
}

static unsigned long long exec_memory_limit; /* bytes of address space per exec; 0: none */
static unsigned long long exec_nproc_limit;  /* processes of the exec's user (--nproc-limit) */

/* Makes the command, not the helper, the one to die when memory runs out. */
static void limit_exec_memory(void) {
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)!write(fd, "1000", 4);
        close(fd);
    }
    if (exec_memory_limit) {
        struct rlimit limit = {exec_memory_limit, exec_memory_limit};
        setrlimit(RLIMIT_AS, &limit);
    }
    if (exec_nproc_limit) {
        struct rlimit limit = {exec_nproc_limit, exec_nproc_limit};
        setrlimit(RLIMIT_NPROC, &limit);
    }
}

static int make_parents(const char *dir);

static int tty_stdin;       /* --tty: each command's stdin is a terminal of its own */
static int child_stdin = -1; /* the pty's side the next command gets as stdin */

/* A pty whose slave becomes the command's stdin (no controlling terminal: nothing gets SIGHUP
 * when the helper closes the master as the command ends), sized like a terminal window, with an
 * end-of-file already typed: a command reading stdin gets EOF, as from /dev/null, while isatty,
 * tty and stty size see a terminal. Output stays on pipes, byte for byte. bash makes the pty its
 * controlling terminal, so its exit would send SIGHUP to what it left in the background: the
 * command starts with SIGHUP ignored, as under nohup, and background work lives on as it does
 * without a terminal. */
static int open_tty(int *slave) {
    int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) return -1;
    char *name = grantpt(master) || unlockpt(master) ? NULL : ptsname(master);
    *slave = name ? open(name, O_RDWR | O_NOCTTY | O_CLOEXEC) : -1;
    if (*slave < 0) {
        close(master);
        return -1;
    }
    struct winsize size = {.ws_row = 40, .ws_col = 120};
    ioctl(*slave, TIOCSWINSZ, &size);
    (void)!write(master, "\x04", 1);
    set_nonblocking(master);
    return master;
}

/* Runs in the forked child; never returns. */
static void exec_child(const jv *req, int out_w, int err_w) {
    setsid();
    limit_exec_memory();
    for (size_t i = 0; i < sizeof handled_signals / sizeof *handled_signals; i++)
        signal(handled_signals[i], SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (child_stdin >= 0) signal(SIGHUP, SIG_IGN); /* bash takes the pty as its terminal */
    int devnull = child_stdin >= 0 ? child_stdin : open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out_w, 1);
    dup2(err_w, 2);
    const char *log = jstr(req, "log");
    if (log && *log) {
        char *dir = xstrdup(log);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
            *slash = 0;
            make_parents(dir);
        }
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) child_fail(126, "cannot open the log %s: %s\n", log);
        dup2(fd, 1);
        dup2(fd, 2);
    }
    const jv *env = jget(req, "env");
    const char *user = jstr(req, "user");
    char *home = NULL;
    if (user && *user) {
        ident who;
        char err[512];
        if (resolve_user(user, &who, err, sizeof err)) {
            errno = 0;
            child_fail(126, "%s\n", err);
        }
        if (setgroups((size_t)who.ngroups, who.groups) || setgid(who.gid) || setuid(who.uid))
            child_fail(126, "cannot switch to user %s: %s\n", user);
        if (jbool(req, "set_home") && !jget(env, "HOME")) {
            home = xmalloc(strlen(who.home) + 6);
            sprintf(home, "HOME=%s", who.home);
        }
    }
    const char *cwd = jstr(req, "cwd");
    if (cwd && *cwd && chdir(cwd)) child_fail(126, "chdir to %s failed: %s\n", cwd);
    size_t count = 0, extra = (env && env->type == J_OBJ ? env->n : 0) + 2;
    for (char **e = environ; *e; e++) count++;
    char **envp = xmalloc((count + extra) * sizeof(char *));
    size_t k = 0;
    for (char **e = environ; *e; e++) {
        size_t name_len = strcspn(*e, "=");
        int replaced = home && name_len == 4 && !strncmp(*e, "HOME", 4);
        for (size_t i = 0; !replaced && env && env->type == J_OBJ && i < env->n; i++)
            replaced = strlen(env->kids[i].str) == name_len &&
                       !strncmp(*e, env->kids[i].str, name_len);
        if (!replaced) envp[k++] = *e;
    }
    for (size_t i = 0; env && env->type == J_OBJ && i < env->n; i++) {
        const jv *value = &env->kids[i].kids[0];
        if (value->type != J_STR) continue;
        char *entry = xmalloc(strlen(env->kids[i].str) + value->len + 2);
        sprintf(entry, "%s=%s", env->kids[i].str, value->str);
        envp[k++] = entry;
    }
    if (home) envp[k++] = home;
    envp[k] = NULL;
    environ = envp;
    const char *command = jstr(req, "command");
    if (command) {
        char *bash[] = {"bash", "-c", (char *)command, NULL};
        execv("/bin/bash", bash);
        char *sh[] = {"sh", "-c", (char *)command, NULL};
        execv("/bin/sh", sh);
        child_fail(127, "%s: %s\n", "/bin/sh");
    }
    const jv *argv = jget(req, "argv");
    if (!argv || argv->type != J_ARR || argv->n == 0) {
        errno = EINVAL;
        child_fail(126, "%s: %s\n", "exec needs a command or a non-empty argv");
    }
    char **args = xmalloc((argv->n + 1) * sizeof(char *));
    for (size_t i = 0; i < argv->n; i++)
        args[i] = argv->kids[i].type == J_STR ? argv->kids[i].str : "";
    args[argv->n] = NULL;
    execvp(args[0], args);
    child_fail(errno == ENOENT ? 127 : 126, "%s: %s\n", args[0]);
}

static void start_job(long long id, const jv *req) {
    int out[2], err[2];
    double started = now_s();
    if (pipe2(out, O_CLOEXEC)) goto fail;
    if (pipe2(err, O_CLOEXEC)) {
        close(out[0]);
        close(out[1]);
        goto fail;
    }
    const char *logged = jstr(req, "log");
    int master = tty_stdin && !(logged && *logged) ? open_tty(&child_stdin) : -1;
    pid_t pid = fork();
    if (pid == 0) exec_child(req, out[1], err[1]);
    close(out[1]);
    close(err[1]);
    if (child_stdin >= 0) close(child_stdin);
    child_stdin = -1;
    if (pid < 0 && master >= 0) close(master);
    if (pid < 0) {
        close(out[0]);
        close(err[0]);
        goto fail;
    }
    job *j = xmalloc(sizeof *j);
    memset(j, 0, sizeof *j);
    j->id = id;
    j->pid = pid;
    const char *log = jstr(req, "log");
    j->supervised = log && *log;
    j->tty = master;
    j->fd[0] = out[0];
    j->fd[1] = err[0];
    set_nonblocking(out[0]);
    set_nonblocking(err[0]);
    double cap = jnum(req, "cap", DEFAULT_CAP), timeout = jnum(req, "timeout_s", -1);
    j->cap = cap < 0 ? 0 : (size_t)cap;
    j->started = started;
    j->deadline = timeout >= 0 ? started + timeout : 0;
    j->next = jobs;
    jobs = j;
    return;
fail:;
    char msg[256];
    int n = snprintf(msg, sizeof msg, "sandboxd: cannot start the command: %s\n", strerror(errno));
    buf b = head(id, "stderr");
    send_frame(&b, msg, (size_t)n);
    b = head(id, "exit");
    bprintf(&b, ",\"exit_code\":126,\"signal\":null,\"timed_out\":false,"
                "\"stdout_truncated\":false,\"stderr_truncated\":false,\"duration_s\":%.6f",
            now_s() - started);
    send_frame(&b, NULL, 0);
}

static void forward(job *j, int stream, const char *data, size_t n) {
    size_t room = j->cap > j->sent[stream] ? j->cap - j->sent[stream] : 0;
    size_t kept = n < room ? n : room;
    if (kept) {
        buf b = head(j->id, stream ? "stderr" : "stdout");
        send_frame(&b, data, kept);
        j->sent[stream] += kept;
    }
    if (kept < n) j->truncated[stream] = 1;
}

/* Read what the pipe holds; with `bound` only what was there when called. 0 at EOF. */
static int pump(job *j, int stream, int bound) {
    static char chunk[OUTPUT_CHUNK];
    int left = INT_MAX;
    if (bound && ioctl(j->fd[stream], FIONREAD, &left)) left = 0;
    while (left > 0) {
        ssize_t n = read(j->fd[stream], chunk, left < OUTPUT_CHUNK ? (size_t)left : OUTPUT_CHUNK);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) return 0;
        if (n < 0) return errno == EAGAIN ? 1 : 0;
        forward(j, stream, chunk, (size_t)n);
        left -= (int)n;
        if (!bound) break; /* one chunk per turn of the loop keeps things fair */
    }
    return 1;
}

static void finish_job(job *j) {
    if (j->tty >= 0) close(j->tty);
    j->tty = -1;
    for (int s = 0; s < 2; s++) {
        if (j->fd[s] < 0) continue;
        if (pump(j, s, 1)) {
            add_drain(j->fd[s]);
        } else {
            close(j->fd[s]);
        }
        j->fd[s] = -1;
    }
    buf b = head(j->id, "exit");
    if (WIFEXITED(j->status) && !j->timed_out)
        bprintf(&b, ",\"exit_code\":%d,\"signal\":null", WEXITSTATUS(j->status));
    else if (WIFSIGNALED(j->status))
        bprintf(&b, ",\"exit_code\":null,\"signal\":%d", WTERMSIG(j->status));
    else
        bputs(&b, ",\"exit_code\":null,\"signal\":null");
    bprintf(&b, ",\"timed_out\":%s,\"stdout_truncated\":%s,\"stderr_truncated\":%s",
            j->timed_out ? "true" : "false", j->truncated[0] ? "true" : "false",
            j->truncated[1] ? "true" : "false");
    bprintf(&b, ",\"duration_s\":%.6f", now_s() - j->started);
    send_frame(&b, NULL, 0);
}

/* ---------------------------------------------------------------- file transfers */

typedef struct transfer {
    long long id;
    int fd;
    int writing;
    uint64_t size;
    char *path, *tmp, *user; /* writes only */
    int mode, err;
    char *err_path;
    struct transfer *next;
} transfer;

static transfer *transfers;

static transfer *find_transfer(long long id) {
    for (transfer *t = transfers; t; t = t->next)
        if (t->id == id) return t;
    return NULL;
}

static void drop_transfer(transfer *t) {
    for (transfer **p = &transfers; *p; p = &(*p)->next)
        if (*p == t) {
            *p = t->next;
            break;
        }
    if (t->fd >= 0) close(t->fd);
    if (t->tmp) unlink(t->tmp);
    free(t->path);
    free(t->tmp);
    free(t->err_path);
    free(t->user);
    free(t);
}

static transfer *new_transfer(long long id, int writing) {
    transfer *t = xmalloc(sizeof *t);
    memset(t, 0, sizeof *t);
    t->id = id;
    t->fd = -1;
    t->writing = writing;
    t->next = transfers;
    transfers = t;
    return t;
}

static void open_read(long long id, const jv *req) {
    const char *path = jstr(req, "path");
    if (!path) return send_error(id, EINVAL, "read_file needs a path", NULL);
    int as_user = fs_become(jstr(req, "user"), id, path);
    if (as_user < 0) return;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    int err = errno;
    if (as_user) fs_restore();
    if (fd < 0) return send_error(id, err, NULL, path);
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        err = S_ISDIR(st.st_mode) ? EISDIR : EINVAL;
        close(fd);
        return send_error(id, err, err == EISDIR ? NULL : "not a regular file", path);
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    new_transfer(id, 0)->fd = fd;
}

/* Send the next chunk of a read; returns 0 when the transfer is over. */
static int pump_read(transfer *t) {
    static char chunk[FILE_CHUNK];
    ssize_t n;
    do n = read(t->fd, chunk, sizeof chunk);
    while (n < 0 && errno == EINTR);
    if (n < 0) {
        send_error(t->id, errno, NULL, NULL);
        return 0;
    }
    if (n > 0) {
        buf b = head(t->id, "data");
        send_frame(&b, chunk, (size_t)n);
        t->size += (uint64_t)n;
        return 1;
    }
    buf b = head(t->id, "done");
    bprintf(&b, ",\"size\":%llu", (unsigned long long)t->size);
    send_frame(&b, NULL, 0);
    return 0;
}

static void write_failed(transfer *t, const char *where) {
    if (!t->err) {
        t->err = errno ? errno : EIO;
        if (where) t->err_path = xstrdup(where);
    }
    if (t->fd >= 0) close(t->fd);
    t->fd = -1;
}

static int make_parents(const char *dir) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p) continue;
        char saved = *p;
        *p = 0;
        if (mkdir(path, 0755) && errno != EEXIST) return -1;
        if (!saved) return 0;
        *p = saved;
    }
}

static void open_write(long long id, const jv *req) {
    const char *path = jstr(req, "path");
    transfer *t = new_transfer(id, 1);
    t->mode = (int)jnum(req, "mode", 0644) & 07777;
    t->path = xstrdup(path ? path : "");
    t->user = jstr(req, "user") ? xstrdup(jstr(req, "user")) : NULL;
    const char *slash = strrchr(t->path, '/');
    if (!path || path[0] != '/' || !slash[1]) {
        errno = path && path[0] == '/' ? EISDIR : EINVAL;
        write_failed(t, NULL);
    } else {
        int as_user = fs_become(t->user, id, path);
        if (as_user < 0) { /* already answered */
            drop_transfer(t);
            return;
        }
        char dir[PATH_MAX];
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - t->path), t->path);
        static unsigned long counter;
        t->tmp = xmalloc(strlen(t->path) + 64);
        sprintf(t->tmp, "%s/.%s.envfarm-%d-%lu", dir, slash + 1, (int)getpid(), ++counter);
        errno = 0;
        if (jbool(req, "mkdir") && *dir && make_parents(dir)) {
            write_failed(t, dir);
        } else if ((t->fd = open(t->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                                 0600)) < 0) {
            write_failed(t, NULL);
        }
        if (t->fd < 0) {
            free(t->tmp);
            t->tmp = NULL;
        }
        if (as_user) fs_restore();
    }
}

static void write_chunk(transfer *t, const char *data, size_t len, int eof) {
    while (len && t->fd >= 0) {
        ssize_t n = write(t->fd, data, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            write_failed(t, NULL);
            break;
        }
        data += n;
        len -= (size_t)n;
        t->size += (uint64_t)n;
    }
    if (!eof) return;
    if (t->fd >= 0) {
        if (fchmod(t->fd, (mode_t)t->mode) || close(t->fd)) write_failed(t, NULL);
        t->fd = -1;
        int as_user = t->err ? 0 : fs_become(t->user, t->id, t->path);
        if (as_user < 0) { /* already answered */
            drop_transfer(t);
            return;
        }
        if (!t->err && rename(t->tmp, t->path)) write_failed(t, NULL);
        else if (!t->err) {
            free(t->tmp);
            t->tmp = NULL;
        }
        if (as_user) fs_restore();
    }
    if (t->err) {
        send_error(t->id, t->err, NULL, t->err_path ? t->err_path : t->path);
    } else {
        buf b = head(t->id, "done");
        bprintf(&b, ",\"size\":%llu", (unsigned long long)t->size);
        send_frame(&b, NULL, 0);
    }
    drop_transfer(t);
}

/* ---------------------------------------------------------------- requests */

#include "relay.c"
#include "elevate.c"
#include "route.c"
#include "dress.c"

/* What finished commands left running, killed when the container is short of processes
 * (fewer than `min_free` below --pids-limit), so that grading can start its own: the agent's
 * excess ends as its outcome, not as a sandbox that can no longer run anything. Waits up to
 * two seconds for the killed to be reaped. */
static int reserve_fd = -1;
static unsigned long long reserve_bytes; /* --reserve-mb */

static void take_reserve(void) {
    if (!reserve_bytes) return;
    int fd = open("/", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        char path[] = "/.envfarm-reserve-XXXXXX";
        fd = mkostemp(path, O_CLOEXEC);
        if (fd >= 0) unlink(path);
    }
    int err = fd < 0 ? errno : posix_fallocate(fd, 0, (off_t)reserve_bytes);
    if (err) {
        diag("no disk reserve: %s", strerror(err));
        if (fd >= 0) close(fd);
        return;
    }
    reserve_fd = fd;
}

static void free_reserve(long long id) {
    unsigned long long freed = 0;
    if (reserve_fd >= 0) {
        if (ftruncate(reserve_fd, 0)) diag("reserve: %s", strerror(errno));
        close(reserve_fd);
        reserve_fd = -1;
        freed = reserve_bytes;
    }
    buf b = head(id, "done");
    bprintf(&b, ",\"freed\":%llu", freed);
    send_frame(&b, NULL, 0);
}

static void reclaim_processes(long long id, const jv *req) {
    long min_free = (long)jnum(req, "min_free", 64);
    long tasks = count_tasks();
    size_t killed = 0;
    if (pids_limit && tasks >= 0 && tasks + min_free > pids_limit) {
        pid_t *roots = xmalloc((nfinished_sessions + 1) * sizeof *roots);
        size_t n = 0;
        for (size_t i = 0; i < nfinished_sessions; i++) {
            int live = 0;
            for (job *j = jobs; j; j = j->next) live |= j->pid == finished_sessions[i];
            if (!live) roots[n++] = finished_sessions[i];
        }
        killed = kill_trees(roots, n, 0);
        free(roots);
        for (int i = 0; i < 100 && count_tasks() + min_free > pids_limit; i++) {
            usleep(20000);
            reap(); /* the helper is init: the killed are zombies until it reaps them */
        }
    }
    buf b = head(id, "done");
    bprintf(&b, ",\"tasks\":%ld,\"limit\":%ld,\"killed\":%zu", tasks, pids_limit, killed);
    send_frame(&b, NULL, 0);
}

/* ---------------------------------------------------------------- walk and remove */

static FILE *walk_out;
static const char *walk_root;
static size_t walk_entries, walk_failed;

static char type_letter(mode_t mode) {
    if (S_ISREG(mode)) return 'f';
    if (S_ISDIR(mode)) return 'd';
    if (S_ISLNK(mode)) return 'l';
    if (S_ISFIFO(mode)) return 'p';
    if (S_ISSOCK(mode)) return 's';
    if (S_ISCHR(mode)) return 'c';
    if (S_ISBLK(mode)) return 'b';
    return 'U';
}

static int walk_entry(const char *path, const struct stat *st, int flag, struct FTW *at) {
    if (at->level == 0) return 0;
    if (flag == FTW_NS) return 0; /* vanished, or unreadable parent: nothing to stat */
    const char *relative = path + strlen(walk_root);
    while (*relative == '/') relative++;
    fprintf(walk_out, "%c %lld.%09ld %s", type_letter(st->st_mode), (long long)st->st_ctim.tv_sec,
            (long)st->st_ctim.tv_nsec, relative);
    fputc('\0', walk_out);
    walk_entries++;
    return 0;
}

static void walk_tree(long long id, const jv *req) {
    const char *root = jstr(req, "path"), *out = jstr(req, "out");
    if (!root || !out) return send_error(id, EINVAL, "walk needs a path and an out file", NULL);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) return send_error(id, errno, NULL, out);
    walk_out = fdopen(fd, "w");
    if (!walk_out) {
        close(fd);
        return send_error(id, errno, NULL, out);
    }
    setvbuf(walk_out, NULL, _IOFBF, 1 << 20);
    walk_root = root;
    walk_entries = 0;
    int failed = nftw(root, walk_entry, 64, FTW_PHYS | FTW_MOUNT) != 0;
    int err = errno;
    long bytes = ftell(walk_out);
    if (fclose(walk_out) != 0 && !failed) failed = 1, err = errno;
    walk_out = NULL;
    if (failed) return send_error(id, err, "walk failed", root);
    buf b = head(id, "done");
    bprintf(&b, ",\"entries\":%zu,\"bytes\":%ld", walk_entries, bytes);
    send_frame(&b, NULL, 0);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *at) {
    (void)st;
    (void)at;
    int done = flag == FTW_DP ? rmdir(path) : unlink(path);
    if (done != 0 && errno != ENOENT) walk_failed++;
    return 0;
}

static int remove_below(const char *path, const struct stat *st, int flag, struct FTW *at) {
    return at->level == 0 ? 0 : remove_entry(path, st, flag, at);
}

static void remove_paths(long long id, const jv *req) {
    const jv *paths = jget(req, "paths"), *contents = jget(req, "contents");
    if (!paths || paths->type != J_ARR) return send_error(id, EINVAL, "remove needs paths", NULL);
    if (contents && contents->type != J_ARR)
        return send_error(id, EINVAL, "remove's contents must be a list", NULL);
    size_t removed = 0;
    walk_failed = 0;
    for (size_t i = 0; i < paths->n; i++) {
        const char *path = paths->kids[i].type == J_STR ? paths->kids[i].str : NULL;
        struct stat st;
        if (!path || *path != '/' || lstat(path, &st) != 0) continue;
        if (nftw(path, remove_entry, 64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0) walk_failed++;
        if (lstat(path, &st) != 0) removed++;
    }
    for (size_t i = 0; contents && i < contents->n; i++) {
        const char *path = contents->kids[i].type == J_STR ? contents->kids[i].str : NULL;
        struct stat st;
        if (!path || *path != '/' || lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (nftw(path, remove_below, 64, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) != 0) walk_failed++;
    }
    buf b = head(id, "done");
    bprintf(&b, ",\"removed\":%zu,\"failed\":%zu", removed, walk_failed);
    send_frame(&b, NULL, 0);
}

#include "sweep.c"

static void cancel(long long id) {
    relay_cancel(id);
    for (job *j = jobs; j; j = j->next)
        if (j->id == id && !j->exited) kill_tree(j->pid);
    transfer *t = find_transfer(id);
    if (t) drop_transfer(t);
}

static void dispatch(const char *text, size_t text_len, const char *payload, size_t len) {
    jparser ps = {text, text + text_len, NULL};
    jv req;
    if (jparse_value(&ps, &req, 0) || req.type != J_OBJ) {
        send_error(0, EPROTO, ps.err ? ps.err : "a header must be a JSON object", NULL);
        jfree(&req);
        return;
    }
    long long id = (long long)jnum(&req, "id", 0);
    const char *op = jstr(&req, "op");
    op = op ? op : "";
    if (!strcmp(op, "cancel")) {
        cancel(id);
    } else if (!strcmp(op, "write_data")) {
        transfer *t = find_transfer(id);
        if (t && t->writing) write_chunk(t, payload, len, jbool(&req, "eof"));
    } else if (term_signal) {
        send_error(id, ESHUTDOWN, "the sandbox is shutting down", NULL);
    } else if (!strcmp(op, "ping")) {
        buf b = head(id, "pong");
        bprintf(&b, ",\"version\":%d,\"pid\":%d", PROTOCOL_VERSION, (int)getpid());
        send_frame(&b, NULL, 0);
    } else if (!strcmp(op, "exec")) {
        start_job(id, &req);
    } else if (!strcmp(op, "reclaim_processes")) {
        reclaim_processes(id, &req);
    } else if (!strcmp(op, "free_reserve")) {
        free_reserve(id);
    } else if (!strcmp(op, "walk")) {
        walk_tree(id, &req);
    } else if (!strcmp(op, "remove")) {
        remove_paths(id, &req);
    } else if (!strcmp(op, "sweep")) {
        sweep(id, &req);
    } else if (!strcmp(op, "read_file")) {
        open_read(id, &req);
    } else if (!strcmp(op, "write_file")) {
        open_write(id, &req);
        transfer *t = find_transfer(id);
        if (t) write_chunk(t, payload, len, jbool(&req, "eof"));
    } else if (!relay_dispatch(id, op, &req, payload, len)) {
        send_error(id, EINVAL, "unknown op", NULL);
    }
    jfree(&req);
}

/* ---------------------------------------------------------------- the loop */

static int signal_pipe[2];

static void on_signal(int sig) {
    int saved = errno;
    if (sig != SIGCHLD) term_signal = sig;
    (void)!write(signal_pipe[1], "", 1);
    errno = saved;
}

static void shutdown_now(int code) {
    for (job *j = jobs; j; j = j->next)
        if (!j->exited) kill_tree(j->pid);
    while (transfers) drop_transfer(transfers);
    _exit(code);
}

static void reap(void) {
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        elevate_reaped(pid, status);
        for (job *j = jobs; j; j = j->next)
            if (j->pid == pid) {
                j->exited = 1;
                j->status = status;
            }
    }
}

/* Parse and dispatch every complete frame in `in`; fatal on a malformed stream. */
static void consume(buf *in) {
    size_t off = 0;
    static buf header;
    while (in->n - off >= 8) {
        const unsigned char *p = (const unsigned char *)in->d + off;
        uint32_t hlen = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
        uint32_t plen = (uint32_t)p[4] << 24 | (uint32_t)p[5] << 16 | (uint32_t)p[6] << 8 | p[7];
        if (hlen == 0 || hlen > MAX_HEADER || plen > MAX_PAYLOAD) {
            diag("malformed frame (header %u bytes, payload %u bytes); stopping", hlen, plen);
            shutdown_now(2);
        }
        if (in->n - off < 8 + (size_t)hlen + plen) {
            breserve(in, 8 + (size_t)hlen + plen - (in->n - off));
            break;
        }
        header.n = 0;
        bput(&header, p + 8, hlen);
        bput(&header, "", 1);
        dispatch(header.d, hlen, (const char *)p + 8 + hlen, plen);
        off += 8 + (size_t)hlen + plen;
    }
    memmove(in->d, in->d + off, in->n - off);
    in->n -= off;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--version")) {
        printf("envfarm-sandboxd protocol %d\n", PROTOCOL_VERSION);
        return 0;
    }
    idle_member(argv);
    char *opts[64];
    int nopts = 0, sudo = 0, drop_route = 0;
    const char *dress_user = NULL;
    for (int i = 1; i < argc && nopts < 64; i++) opts[nopts++] = argv[i];
    const char *from_env = getenv(OPTIONS_ENV);
    char *spare = from_env ? xstrdup(from_env) : NULL;
    for (char *tok = spare ? strtok(spare, " ") : NULL; tok && nopts < 64; tok = strtok(NULL, " "))
        opts[nopts++] = tok;
    unsetenv(OPTIONS_ENV); /* the commands it starts inherit its environment */
    for (int i = 0; i < nopts; i++) {
        if (!strcmp(opts[i], "--hide-container")) {
            unlink("/.dockerenv");
            continue;
        }
        if (!strcmp(opts[i], "--tty")) {
            tty_stdin = 1;
            continue;
        }
        if (!strcmp(opts[i], "--sudo")) {
            sudo = 1;
            continue;
        }
        if (!strcmp(opts[i], "--drop-route")) {
            drop_route = 1;
            continue;
        }
        if (i + 1 >= nopts) break;
        if (!strcmp(opts[i], "--dress")) dress_user = opts[i + 1];
        unsigned long long value = strtoull(opts[i + 1], NULL, 10);
        if (!strcmp(opts[i], "--memory-limit-mb")) exec_memory_limit = value << 20;
        if (!strcmp(opts[i], "--nproc-limit")) exec_nproc_limit = value;
        if (!strcmp(opts[i], "--pids-limit")) pids_limit = (long)value;
        if (!strcmp(opts[i], "--reserve-mb")) reserve_bytes = value << 20;
        i++;
    }
    if (drop_route) drop_default_routes();
    if (dress_user) dress_machine(dress_user);
    if (drop_route) give_up_setup_caps();
    harden_helper();
    take_reserve();
    if (sudo) elevate_listen();
    umask(022);
    saved_ngroups = getgroups(MAX_GROUPS, saved_groups);
    if (saved_ngroups < 0) saved_ngroups = 0;
    if (pipe2(signal_pipe, O_CLOEXEC | O_NONBLOCK)) {
        diag("pipe: %s", strerror(errno));
        return 1;
    }
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i + 1 < sizeof handled_signals / sizeof *handled_signals; i++)
        sigaction(handled_signals[i], &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    set_nonblocking(0);
    for (int fd = 0; fd < 2; fd++) {
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        fcntl(fd, F_SETPIPE_SZ, 1 << 20); /* fewer wakeups on large transfers; may fail */
    }
    buf in = {0};
    struct pollfd *fds = NULL;
    size_t fds_cap = 0;
    double term_deadline = 0;
    for (;;) {
        if (term_signal && !term_deadline) term_deadline = now_s() + TERM_GRACE_S;
        if (term_deadline && (!jobs || now_s() >= term_deadline)) shutdown_now(128 + term_signal);
        size_t njobs = 0;
        for (job *j = jobs; j; j = j->next) njobs++;
        size_t need = 2 + 2 * njobs + ndrains + relay_nfds() + elevate_nfds();
        if (need > fds_cap) fds = xrealloc(fds, (fds_cap = need * 2) * sizeof *fds);
        size_t n = 0;
        fds[n++] = (struct pollfd){signal_pipe[0], POLLIN, 0};
        fds[n++] = (struct pollfd){0, POLLIN, 0};
        for (job *j = jobs; j; j = j->next)
            for (int s = 0; s < 2; s++) fds[n++] = (struct pollfd){j->fd[s], POLLIN, 0};
        for (size_t i = 0; i < ndrains; i++) fds[n++] = (struct pollfd){drains[i], POLLIN, 0};
        size_t relay_at = n;
        n += relay_fill(fds + n);
        size_t elevate_at = n;
        n += elevate_fill(fds + n);
        double wait = -1, now = now_s();
        for (transfer *t = transfers; t; t = t->next)
            if (!t->writing) wait = 0;
        for (job *j = jobs; j; j = j->next)
            if (j->deadline && !j->timed_out && (wait < 0 || j->deadline - now < wait))
                wait = j->deadline - now < 0 ? 0 : j->deadline - now;
        if (term_deadline && (wait < 0 || term_deadline - now < wait)) wait = term_deadline - now;
        int timeout_ms = wait < 0 ? -1 : (int)(wait * 1000) + (wait > 0);
        if (poll(fds, n, timeout_ms) < 0 && errno != EINTR) {
            diag("poll: %s", strerror(errno));
            shutdown_now(1);
        }
        char sink[OUTPUT_CHUNK];
        if (fds[0].revents) {
            while (read(signal_pipe[0], sink, sizeof sink) > 0) {
            }
        }
        elevate_service(fds + elevate_at); /* before reap: it keeps the order fill made */
        reap();
        size_t k = 2;
        for (job *j = jobs; j; j = j->next)
            for (int s = 0; s < 2; s++, k++)
                if (j->fd[s] >= 0 && fds[k].revents && !pump(j, s, 0)) {
                    close(j->fd[s]);
                    j->fd[s] = -1;
                }
        for (size_t i = 0; i < ndrains; i++, k++) {
            if (!fds[k].revents) continue;
            ssize_t got = read(drains[i], sink, sizeof sink);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                close(drains[i]);
                drains[i] = -1;
            }
        }
        size_t kept = 0;
        for (size_t i = 0; i < ndrains; i++)
            if (drains[i] >= 0) drains[kept++] = drains[i];
        ndrains = kept;
        relay_service(fds + relay_at);
        if (fds[1].revents) {
            breserve(&in, 256 * 1024);
            ssize_t got = read(0, in.d + in.n, in.cap - in.n);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) shutdown_now(0);
            if (got > 0) {
                in.n += (size_t)got;
                consume(&in);
            }
        }
        for (transfer *t = transfers, *next; t; t = next) {
            next = t->next;
            if (!t->writing && !pump_read(t)) drop_transfer(t);
        }
        now = now_s();
        for (job *j = jobs; j; j = j->next)
            if (!j->exited && j->deadline && !j->timed_out && now >= j->deadline) {
                j->timed_out = 1;
                kill_tree(j->pid);
            }
        for (job **p = &jobs; *p;) {
            job *j = *p;
            if (!j->exited) {
                p = &j->next;
                continue;
            }
            finish_job(j);
            if (!j->supervised) remember_session(j->pid);
            *p = j->next;
            free(j);
        }
    }
}
