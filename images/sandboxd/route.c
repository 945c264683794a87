/*
 * `--drop-route` (included by sandboxd.c): as the helper starts, before it serves anything, it
 * removes the IPv4 default routes of a container whose one interface is its environment's
 * internal network. The engine gives such a container a route to a gateway nobody holds; "no
 * network" means no route, so the routing table shows the environment's subnet and nothing
 * else. With a second interface (the default bridge, joined before a restart for a verifier
 * with network access) the routes are the network the task asked for, and stay.
 *
 * The container is given CAP_NET_ADMIN for this alone: the helper then gives it up, with the
 * workstation dress's CAP_MKNOD (dress.c), out of its permitted set, and under
 * no-new-privileges nothing it starts, root included, can have them again. envfarm gives it
 * only where no process enters the container past the helper (no image HEALTHCHECK, which the
 * engine runs with the container's capabilities); elsewhere a throwaway container removes the
 * route (envfarm/sandbox/docker/networks.py).
 */
#include <linux/capability.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <sys/syscall.h>

/* CAP_NET_ADMIN and CAP_MKNOD out of every set but the bounding one (no CAP_SETPCAP). */
static void give_up_setup_caps(void) {
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &header, data)) return;
    unsigned drop[] = {CAP_NET_ADMIN, CAP_MKNOD};
    for (size_t i = 0; i < 2; i++) {
        unsigned word = drop[i] / 32, bit = 1u << (drop[i] % 32);
        data[word].effective &= ~bit;
        data[word].permitted &= ~bit;
        data[word].inheritable &= ~bit;
    }
    if (syscall(SYS_capset, &header, data)) diag("capset: %s", strerror(errno));
}

static int interfaces_besides_lo(void) {
    int count = 0;
    DIR *dir = opendir("/sys/class/net");
    for (struct dirent *e; dir && (e = readdir(dir));)
        count += e->d_name[0] != '.' && strcmp(e->d_name, "lo") != 0;
    if (dir) closedir(dir);
    return count;
}

/* RTM_DELROUTE of an IPv4 default route of the main table until none is left (ESRCH). */
static void drop_default_routes(void) {
    if (interfaces_besides_lo() != 1) return;
    int sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (sock < 0) {
        diag("drop-route: socket: %s", strerror(errno));
        return;
    }
    for (unsigned seq = 1; seq <= 8; seq++) {
        struct {
            struct nlmsghdr msg;
            struct rtmsg rt;
        } req = {{NLMSG_LENGTH(sizeof(struct rtmsg)), RTM_DELROUTE, NLM_F_REQUEST | NLM_F_ACK, seq, 0},
                 {.rtm_family = AF_INET, .rtm_table = RT_TABLE_MAIN, .rtm_scope = RT_SCOPE_NOWHERE}};
        union {
            struct nlmsghdr msg;
            char space[1024];
        } ack;
        ssize_t got = -1;
        if (send(sock, &req, req.msg.nlmsg_len, 0) >= 0) got = recv(sock, &ack, sizeof ack, 0);
        if (got < (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) || ack.msg.nlmsg_type != NLMSG_ERROR) {
            diag("drop-route: no answer from the kernel: %s", strerror(errno));
            break;
        }
        int error = ((struct nlmsgerr *)NLMSG_DATA(&ack.msg))->error;
        if (error == -ESRCH) break;
        if (error) {
            diag("drop-route: %s", strerror(-error));
            break;
        }
    }
    close(sock);
}
