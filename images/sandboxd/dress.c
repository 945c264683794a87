/*
 * The workstation profile's machine (included by sandboxd.c). With `--dress USER` the helper,
 * as it starts and before it serves anything, adds what a container lacks and a developer's
 * laptop has, where a capability the container is given for this alone allows it:
 *
 * - network interfaces besides lo when the container has none: the laptop's Ethernet port and
 *   its Wi-Fi, both down (a dummy device, else a bridge: the first kind the kernel offers; a
 *   vendor's MAC address). They add no route, so the network stays unreachable as it was;
 * - the /dev of a laptop (DEVICES: terminals, a disk and its partitions, loop devices, input,
 *   sound and graphics nodes) with their usual owners and modes. The device cgroup still
 *   refuses to open any of them, root included; only their names and numbers are there;
 * - the processes a desktop session runs (SESSION: systemd's daemons as root, the graphical
 *   session and an editor as USER), each an idle copy of this program started with that
 *   command line and name (`idle_forever`), so `ps` shows a desktop rather than a dozen
 *   processes.
 *
 * Then the helper gives up CAP_NET_ADMIN and CAP_MKNOD (route.c): under no-new-privileges
 * nothing it starts, root through sudo included, can have them again.
 * Everything here is best effort: what the kernel refuses (a runtime without these devices,
 * gVisor) is left as it was, with a line on stderr.
 */
#include <linux/capability.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

#define IDLE_MARK "INVOCATION_ID"

typedef struct {
    const char *path;
    char kind; /* c, b, d (directory), l (symlink to target) */
    unsigned major, minor;
    mode_t mode;
    const char *group; /* a group name of /etc/group; root when absent */
    const char *target;
} device;

static const device DEVICES[] = {
    {"mem", 'c', 1, 1, 0640, "kmem", 0},
    {"port", 'c', 1, 4, 0640, "kmem", 0},
    {"kmsg", 'c', 1, 11, 0644, 0, 0},
    {"ttyS0", 'c', 4, 64, 0660, "dialout", 0},
    {"ttyS1", 'c', 4, 65, 0660, "dialout", 0},
    {"ttyS2", 'c', 4, 66, 0660, "dialout", 0},
    {"ttyS3", 'c', 4, 67, 0660, "dialout", 0},
    {"loop-control", 'c', 10, 237, 0660, "disk", 0},
    {"hpet", 'c', 10, 228, 0600, 0, 0},
    {"fuse", 'c', 10, 229, 0666, 0, 0},
    {"autofs", 'c', 10, 235, 0644, 0, 0},
    {"btrfs-control", 'c', 10, 234, 0600, 0, 0},
    {"uinput", 'c', 10, 223, 0600, 0, 0},
    {"rfkill", 'c', 10, 242, 0664, "netdev", 0},
    {"watchdog", 'c', 10, 130, 0600, 0, 0},
    {"tpm0", 'c', 10, 224, 0660, "tss", 0},
    {"rtc0", 'c', 248, 0, 0600, 0, 0},
    {"rtc", 'l', 0, 0, 0, 0, "rtc0"},
    {"nvme0n1", 'b', 259, 0, 0660, "disk", 0},
    {"nvme0n1p1", 'b', 259, 1, 0660, "disk", 0},
    {"nvme0n1p2", 'b', 259, 2, 0660, "disk", 0},
    {"nvme0n1p3", 'b', 259, 3, 0660, "disk", 0},
    {"core", 'l', 0, 0, 0, 0, "/proc/kcore"},
    {"log", 'l', 0, 0, 0, 0, "/run/systemd/journal/dev-log"},
    {"initctl", 'l', 0, 0, 0, 0, "/run/initctl"},
    {"block", 'd', 0, 0, 0755, 0, 0},
    {"bus", 'd', 0, 0, 0755, 0, 0},
    {"char", 'd', 0, 0, 0755, 0, 0},
    {"cpu", 'd', 0, 0, 0755, 0, 0},
    {"disk", 'd', 0, 0, 0755, 0, 0},
    {"hugepages", 'd', 0, 0, 0755, 0, 0},
    {"dri", 'd', 0, 0, 0755, 0, 0},
    {"dri/card0", 'c', 226, 0, 0660, "video", 0},
    {"dri/renderD128", 'c', 226, 128, 0660, "render", 0},
    {"input", 'd', 0, 0, 0755, 0, 0},
    {"input/mice", 'c', 13, 63, 0660, "input", 0},
    {"input/event0", 'c', 13, 64, 0660, "input", 0},
    {"input/event1", 'c', 13, 65, 0660, "input", 0},
    {"input/event2", 'c', 13, 66, 0660, "input", 0},
    {"input/event3", 'c', 13, 67, 0660, "input", 0},
    {"mapper", 'd', 0, 0, 0755, 0, 0},
    {"mapper/control", 'c', 10, 236, 0600, 0, 0},
    {"net", 'd', 0, 0, 0755, 0, 0},
    {"net/tun", 'c', 10, 200, 0666, 0, 0},
    {"snd", 'd', 0, 0, 0755, 0, 0},
    {"snd/seq", 'c', 116, 1, 0660, "audio", 0},
    {"snd/timer", 'c', 116, 33, 0660, "audio", 0},
    {"snd/controlC0", 'c', 116, 2, 0660, "audio", 0},
    {"snd/pcmC0D0p", 'c', 116, 3, 0660, "audio", 0},
    {"snd/pcmC0D0c", 'c', 116, 4, 0660, "audio", 0},
};
#define TTYS 64 /* tty0 .. tty63 */
#define LOOPS 8 /* loop0 .. loop7 */

/* 'r': root's, a system daemon; 'u': the developer's session. */
static const struct {
    char who;
    const char *argv;
} SESSION[] = {
    {'r', "/lib/systemd/systemd-journald"},
    {'r', "/lib/systemd/systemd-udevd"},
    {'r', "/lib/systemd/systemd-logind"},
    {'r', "/lib/systemd/systemd-timesyncd"},
    {'r', "/usr/bin/dbus-daemon --system --address=systemd: --nofork --nopidfile "
          "--systemd-activation --syslog-only"},
    {'r', "/usr/sbin/cron -f"},
    {'r', "/usr/sbin/rsyslogd -n -iNONE"},
    {'r', "/usr/sbin/NetworkManager --no-daemon"},
    {'r', "/usr/sbin/wpa_supplicant -u -s -O DIR=/run/wpa_supplicant GROUP=netdev"},
    {'r', "/usr/sbin/ModemManager"},
    {'r', "/usr/libexec/polkitd --no-debug"},
    {'r', "/usr/libexec/accounts-daemon"},
    {'r', "/usr/libexec/udisks2/udisksd"},
    {'r', "/usr/libexec/upowerd"},
    {'r', "/usr/libexec/power-profiles-daemon"},
    {'r', "/usr/libexec/switcheroo-control"},
    {'r', "/usr/lib/bluetooth/bluetoothd"},
    {'r', "/usr/sbin/cupsd -l"},
    {'r', "/usr/sbin/cups-browsed"},
    {'r', "/usr/sbin/gdm3"},
    {'r', "gdm-session-worker [pam/gdm-password]"},
    {'u', "/lib/systemd/systemd --user"},
    {'u', "(sd-pam)"},
    {'u', "/usr/bin/pipewire"},
    {'u', "/usr/bin/wireplumber"},
    {'u', "/usr/bin/pipewire-pulse"},
    {'u', "/usr/bin/dbus-daemon --session --address=systemd: --nofork --nopidfile "
          "--systemd-activation --syslog-only"},
    {'u', "/usr/bin/gnome-keyring-daemon --foreground --components=pkcs11,secrets"},
    {'u', "/usr/libexec/gdm-wayland-session /usr/bin/gnome-session"},
    {'u', "/usr/libexec/gnome-session-binary"},
    {'u', "/usr/bin/gnome-shell"},
    {'u', "/usr/libexec/gnome-shell-calendar-server"},
    {'u', "/usr/libexec/gvfsd"},
    {'u', "/usr/libexec/xdg-permission-store"},
    {'u', "/usr/libexec/xdg-document-portal"},
    {'u', "/usr/libexec/xdg-desktop-portal"},
    {'u', "/usr/libexec/xdg-desktop-portal-gnome"},
    {'u', "/usr/libexec/gsd-power"},
    {'u', "/usr/libexec/gsd-media-keys"},
    {'u', "/usr/libexec/gsd-xsettings"},
    {'u', "/usr/libexec/evolution-source-registry"},
    {'u', "/usr/libexec/gnome-terminal-server"},
    {'u', "bash"},
    {'u', "/usr/share/code/code --unity-launch"},
    {'u', "/usr/share/code/code --type=zygote"},
    {'u', "/usr/lib/firefox-esr/firefox-esr"},
};

/* The gid of group `name` in /etc/group (root's when absent), each name read once: the table
 * names a handful of groups for a hundred nodes. */
static gid_t group_id(const char *name) {
    static struct {
        const char *name;
        gid_t gid;
    } known[16];
    static size_t nknown;
    if (!name) return 0;
    for (size_t i = 0; i < nknown; i++)
        if (!strcmp(known[i].name, name)) return known[i].gid;
    char line[4096], *f[4];
    gid_t found = 0;
    FILE *fp = fopen("/etc/group", "re");
    while (fp && fgets(line, sizeof line, fp)) {
        unsigned long gid;
        if (split_fields(line, f, 4) >= 3 && !strcmp(f[0], name) && !parse_id(f[2], &gid)) {
            found = (gid_t)gid;
            break;
        }
    }
    if (fp) fclose(fp);
    if (nknown < sizeof known / sizeof *known) known[nknown++] = (typeof(known[0])){name, found};
    return found;
}

static void make_node(const char *name, char kind, unsigned major, unsigned minor, mode_t mode,
                      const char *group, const char *target) {
    char path[128];
    snprintf(path, sizeof path, "/dev/%s", name);
    int failed;
    if (kind == 'l') {
        failed = symlink(target, path) && errno != EEXIST;
    } else if (kind == 'd') {
        failed = mkdir(path, mode) && errno != EEXIST;
    } else {
        mode_t type = kind == 'b' ? S_IFBLK : S_IFCHR;
        failed = mknod(path, type | mode, makedev(major, minor)) && errno != EEXIST;
    }
    if (failed) {
        diag("dress: %s: %s", path, strerror(errno));
        return;
    }
    if (kind != 'l' && (chown(path, 0, group_id(group)) || chmod(path, mode)))
        diag("dress: %s: %s", path, strerror(errno));
}

static void dress_devices(void) {
    char name[16];
    for (unsigned i = 0; i < TTYS; i++) {
        snprintf(name, sizeof name, "tty%u", i);
        make_node(name, 'c', 4, i, 0620, "tty", 0);
    }
    for (unsigned i = 0; i < LOOPS; i++) {
        snprintf(name, sizeof name, "loop%u", i);
        make_node(name, 'b', 7, i, 0660, "disk", 0);
    }
    for (size_t i = 0; i < sizeof DEVICES / sizeof *DEVICES; i++) {
        const device *d = &DEVICES[i];
        make_node(d->path, d->kind, d->major, d->minor, d->mode, d->group, d->target);
    }
}

static void put_attr(struct nlmsghdr *msg, unsigned short type, const void *data, size_t len) {
    struct rtattr *attr = (struct rtattr *)((char *)msg + NLMSG_ALIGN(msg->nlmsg_len));
    attr->rta_type = type;
    attr->rta_len = (unsigned short)RTA_LENGTH(len);
    if (len) memcpy(RTA_DATA(attr), data, len);
    msg->nlmsg_len = NLMSG_ALIGN(msg->nlmsg_len) + RTA_ALIGN(attr->rta_len);
}

/* A link of `kind` named `name`, down, with `mac`; 0 when the kernel made it. */
static int add_link(int sock, const char *name, const char *kind, const unsigned char mac[6]) {
    union {
        struct nlmsghdr msg;
        char space[512];
    } req;
    memset(&req, 0, sizeof req);
    req.msg.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
    req.msg.nlmsg_type = RTM_NEWLINK;
    req.msg.nlmsg_flags = NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL | NLM_F_ACK;
    put_attr(&req.msg, IFLA_IFNAME, name, strlen(name) + 1);
    put_attr(&req.msg, IFLA_ADDRESS, mac, 6);
    struct rtattr *info = (struct rtattr *)((char *)&req + NLMSG_ALIGN(req.msg.nlmsg_len));
    put_attr(&req.msg, IFLA_LINKINFO, NULL, 0);
    put_attr(&req.msg, IFLA_INFO_KIND, kind, strlen(kind));
    info->rta_len = (unsigned short)((char *)&req + req.msg.nlmsg_len - (char *)info);
    if (send(sock, &req, req.msg.nlmsg_len, 0) < 0) return -1;
    union {
        struct nlmsghdr msg;
        char space[1024];
    } ack;
    ssize_t got = recv(sock, &ack, sizeof ack, 0);
    if (got < (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) || ack.msg.nlmsg_type != NLMSG_ERROR)
        return -1;
    int error = ((struct nlmsgerr *)NLMSG_DATA(&ack.msg))->error;
    errno = -error;
    return error ? -1 : 0;
}

static void dress_network(void) {
    if (interfaces_besides_lo()) return; /* the container has a network of its own */
    int sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
    if (sock < 0) return;
    static const char *const names[] = {"enp0s31f6", "wlp0s20f3"};
    static const char *const kinds[] = {"dummy", "bridge"};
    unsigned char mac[6] = {0x54, 0xe1, 0xad}; /* a laptop maker's prefix */
    for (size_t n = 0; n < 2; n++) {
        if (getrandom(mac + 3, 3, 0) != 3) memset(mac + 3, (int)n + 1, 3);
        int made = 0;
        for (size_t k = 0; k < 2 && !made; k++) made = add_link(sock, names[n], kinds[k], mac) == 0;
        if (!made) diag("dress: network interface %s: %s", names[n], strerror(errno));
    }
    close(sock);
}

static void spawn_idle(const char *line, const ident *who) {
    pid_t pid = fork();
    if (pid != 0) return;
    int null = open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; fd++) dup2(null, fd);
    closefrom(3);
    setsid();
    if (who && (setgroups((size_t)who->ngroups, who->groups) || setgid(who->gid) ||
                setuid(who->uid)))
        _exit(0);
    char copy[512], *argv[16];
    snprintf(copy, sizeof copy, "%s", line);
    int argc = 0;
    for (char *tok = strtok(copy, " "); tok && argc < 15; tok = strtok(NULL, " "))
        argv[argc++] = tok;
    if (line[0] != '/') argv[0] = copy, argc = 1; /* a name with spaces: one word */
    argv[argc] = NULL;
    char mark[64], home[300];
    unsigned char raw[16];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) memset(raw, 7, sizeof raw);
    int n = snprintf(mark, sizeof mark, "%s=", IDLE_MARK);
    for (size_t i = 0; i < sizeof raw; i++) n += snprintf(mark + n, sizeof mark - (size_t)n, "%02x", raw[i]);
    snprintf(home, sizeof home, "HOME=%s", who ? who->home : "/root");
    char *envp[] = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "LANG=en_US.UTF-8", home, mark, NULL};
    execve("/proc/self/exe", argv, envp);
    _exit(0);
}

static void dress_session(const char *user) {
    ident who;
    char err[512];
    int have_user = resolve_user(user, &who, err, sizeof err) == 0;
    for (size_t i = 0; i < sizeof SESSION / sizeof *SESSION; i++)
        if (SESSION[i].who == 'r' || have_user)
            spawn_idle(SESSION[i].argv, SESSION[i].who == 'u' ? &who : NULL);
}

static void dress_machine(const char *user) {
    dress_network();
    dress_devices();
    give_up_setup_caps();
    dress_session(user);
}

/* An idle member of the session (spawn_idle): named as its command, it waits to be killed. */
static int idle_member(char **argv) {
    if (getpid() == 1 || getppid() != 1 || !getenv(IDLE_MARK) || !argv[0]) return 0;
    const char *base = strrchr(argv[0], '/');
    char name[16];
    snprintf(name, sizeof name, "%s", base ? base + 1 : argv[0]);
    name[strcspn(name, " ")] = 0;
    prctl(PR_SET_NAME, name, 0, 0, 0);
    for (;;) pause();
}
