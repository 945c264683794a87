/*
 * The helper's port relay: a loopback port inside the container whose connections are carried
 * over the helper's stream, so a program in a sandbox without any network (an installed agent)
 * reaches a server envfarm runs on the host. Included by sandboxd.c (one translation unit; it
 * uses that file's buffers, frames and JSON reader).
 *
 *   relay_listen {host?, port}  -> listening {port}  (port 0: the kernel picks one)
 *                                  then, on the same id, for each connection:
 *                                  accept {conn}, conn_data {conn} (payload: bytes read),
 *                                  conn_end {conn} (the program closed or reset it)
 *   relay_send   {conn}          -> nothing (payload: bytes to write to the connection)
 *   relay_close  {conn}          -> nothing: close once what was sent is written
 *   cancel (the listen id)       -> closes the listener and all its connections
 *
 * host defaults to 127.0.0.1 and must be a loopback address. Sockets are non-blocking; bytes
 * for a connection are buffered until it can take them, so a slow reader never stalls the loop.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#define RELAY_CHUNK (64 * 1024)

typedef struct rconn {
    long long listen_id;
    long long conn;
    int fd;
    buf out;
    size_t out_off;
    int ended;   /* conn_end sent: nothing more is read */
    int closing; /* relay_close received: close once out is written */
    struct rconn *next;
} rconn;

typedef struct rlistener {
    long long id;
    int fd;
    struct rlistener *next;
} rlistener;

static rlistener *rlisteners;
static rconn *rconns;
static long long next_conn = 1;
static size_t nrelay_fds;

static void relay_event(long long id, const char *type, long long conn, const void *data,
                        size_t len) {
    buf b = head(id, type);
    bprintf(&b, ",\"conn\":%lld", conn);
    send_frame(&b, data, len);
}

static void relay_free(rconn *c) {
    for (rconn **p = &rconns; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    close(c->fd);
    free(c->out.d);
    free(c);
}

static rconn *relay_find(long long conn) {
    for (rconn *c = rconns; c; c = c->next)
        if (c->conn == conn) return c;
    return NULL;
}

static void relay_end(rconn *c) {
    if (c->ended) return;
    c->ended = 1;
    relay_event(c->listen_id, "conn_end", c->conn, NULL, 0);
}

static void relay_listen(long long id, const jv *req) {
    const char *host = jstr(req, "host");
    double port = jnum(req, "port", 0);
    struct sockaddr_in addr = {0};
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host ? host : "127.0.0.1", &addr.sin_addr) != 1 ||
        (ntohl(addr.sin_addr.s_addr) >> 24) != 127 || port < 0 || port > 65535) {
        send_error(id, EINVAL, "relay_listen takes a loopback host and a port 0..65535", NULL);
        return;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 64)) {
        int err = errno;
        if (fd >= 0) close(fd);
        send_error(id, err, "cannot listen on the relay port", NULL);
        return;
    }
    socklen_t size = sizeof addr;
    getsockname(fd, (struct sockaddr *)&addr, &size);
    rlistener *l = xmalloc(sizeof *l);
    *l = (rlistener){id, fd, rlisteners};
    rlisteners = l;
    buf b = head(id, "listening");
    bprintf(&b, ",\"port\":%d", (int)ntohs(addr.sin_port));
    send_frame(&b, NULL, 0);
}

static void relay_flush(rconn *c) {
    while (c->out_off < c->out.n) {
        ssize_t n = write(c->fd, c->out.d + c->out_off, c->out.n - c->out_off);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        if (n < 0) { /* the program went away: drop what it will never read */
            c->out.n = c->out_off = 0;
            relay_end(c);
            break;
        }
        c->out_off += (size_t)n;
    }
    c->out.n = c->out_off = 0;
    if (c->closing) relay_free(c);
}

/* Returns 1 when `op` is a relay op (handled), 0 otherwise. */
static int relay_dispatch(long long id, const char *op, const jv *req, const char *payload,
                          size_t len) {
    if (!strcmp(op, "relay_listen")) {
        relay_listen(id, req);
        return 1;
    }
    int sending = !strcmp(op, "relay_send");
    if (!sending && strcmp(op, "relay_close")) return 0;
    rconn *c = relay_find((long long)jnum(req, "conn", 0));
    if (!c) return 1; /* closed meanwhile: the program's conn_end is on its way */
    if (sending) {
        if (!c->ended) bput(&c->out, payload, len);
    } else {
        c->closing = 1;
    }
    relay_flush(c);
    return 1;
}

static void relay_cancel(long long id) {
    for (rlistener **p = &rlisteners; *p;) {
        rlistener *l = *p;
        if (l->id != id) {
            p = &l->next;
            continue;
        }
        close(l->fd);
        *p = l->next;
        free(l);
    }
    for (rconn *c = rconns, *next; c; c = next) {
        next = c->next;
        if (c->listen_id == id) relay_free(c);
    }
}

static size_t relay_nfds(void) {
    size_t n = 0;
    for (rlistener *l = rlisteners; l; l = l->next) n++;
    for (rconn *c = rconns; c; c = c->next) n++;
    return n;
}

/* Append the relay's descriptors to `fds`; return how many. */
static size_t relay_fill(struct pollfd *fds) {
    size_t n = 0;
    for (rlistener *l = rlisteners; l; l = l->next) fds[n++] = (struct pollfd){l->fd, POLLIN, 0};
    for (rconn *c = rconns; c; c = c->next) {
        short events = (short)((c->ended ? 0 : POLLIN) | (c->out.n > c->out_off ? POLLOUT : 0));
        fds[n++] = (struct pollfd){c->fd, events, 0};
    }
    nrelay_fds = n;
    return n;
}

/* Serve what poll reported on the descriptors relay_fill added (in the same order). */
static void relay_service(const struct pollfd *fds) {
    size_t k = 0, total = nrelay_fds;
    rconn *first = rconns; /* connections accepted below are not in fds yet */
    for (rlistener *l = rlisteners; l && k < total; l = l->next, k++) {
        if (!fds[k].revents) continue;
        int fd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        rconn *c = xmalloc(sizeof *c);
        *c = (rconn){.listen_id = l->id, .conn = next_conn++, .fd = fd, .next = rconns};
        rconns = c;
        relay_event(l->id, "accept", c->conn, NULL, 0);
    }
    long long ids[256];
    size_t count = 0;
    for (rconn *c = first; c && k + count < total && count < 256; c = c->next) ids[count++] = c->conn;
    for (size_t i = 0; i < count; i++, k++) {
        rconn *c = relay_find(ids[i]); /* NULL: freed by an earlier one's flush */
        short revents = fds[k].revents;
        if (!revents || !c) continue;
        if (revents & POLLOUT) {
            relay_flush(c);
            if (!(c = relay_find(ids[i]))) continue;
        }
        if (c->ended || !(revents & (POLLIN | POLLHUP | POLLERR))) continue;
        char data[RELAY_CHUNK];
        ssize_t got = read(c->fd, data, sizeof data);
        if (got > 0)
            relay_event(c->listen_id, "conn_data", c->conn, data, (size_t)got);
        else if (got == 0 || (errno != EAGAIN && errno != EINTR))
            relay_end(c);
    }
}
