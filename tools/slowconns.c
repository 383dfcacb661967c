/*
 * slowconns: N connections that trickle one header byte each every P ms
 * and never finish their request, as a slow (or hostile) client would, to
 * see what a server does with them. Connections come from A loopback
 * source addresses (127.0.0.2 and up) so that a per-address limit can be
 * stayed under. Prints once a second how many are open, and at the end
 * when the server closed them (lifetime from connect, min / median / max).
 *
 *   build/tools/slowconns -p PORT [-n 5000] [-a 50] [-i 1000] [-d SECONDS]
 *
 * One thread, epoll; the descriptor limit is raised to the hard limit.
 * Time the server meanwhile with any other client (curl -w %{time_total}).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/timeutil.h"

struct conn {
    int fd;
    size_t sent;
    int64_t t_open, t_closed; /* µs; t_closed 0 while open */
};

static const char HEAD[] = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ";

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    int port = 0, n = 5000, addrs = 50, every_ms = 1000, secs = 30;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "-p"))
            port = v;
        else if (!strcmp(argv[i], "-n"))
            n = v;
        else if (!strcmp(argv[i], "-a"))
            addrs = v;
        else if (!strcmp(argv[i], "-i"))
            every_ms = v;
        else if (!strcmp(argv[i], "-d"))
            secs = v;
    }
    if (port <= 0 || n <= 0 || addrs <= 0 || addrs > 250 || every_ms <= 0 || secs <= 0) {
        fprintf(stderr, "usage: slowconns -p PORT [-n 5000] [-a 50] [-i 1000] [-d 30]\n");
        return 2;
    }
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl)) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct conn *c = calloc((size_t)n, sizeof(*c));
    int ep = epoll_create1(0);
    if (!c || ep < 0)
        return 1;
    int failed = 0;
    for (int i = 0; i < n; i++) {
        c[i].fd = -1;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) {
            failed++;
            continue;
        }
        struct sockaddr_in src = {.sin_family = AF_INET};
        src.sin_addr.s_addr = htonl(0x7f000002u + (uint32_t)(i % addrs));
        struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        dst.sin_addr.s_addr = htonl(0x7f000001u);
        if (bind(fd, (struct sockaddr *)&src, sizeof src) ||
            connect(fd, (struct sockaddr *)&dst, sizeof dst)) {
            close(fd);
            failed++;
            continue;
        }
        fcntl(fd, F_SETFL, O_NONBLOCK);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u32 = (uint32_t)i};
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
        c[i].fd = fd;
        c[i].t_open = ifl_now_us();
    }
    printf("%d connections open (%d failed to connect)\n", n - failed, failed);
    fflush(stdout);
    int64_t t0 = ifl_now_us(), next_send = t0, next_print = t0 + 1000000;
    int open_now = n - failed;
    while (ifl_now_us() < t0 + (int64_t)secs * 1000000) {
        int64_t now = ifl_now_us();
        if (now >= next_send) {
            for (int i = 0; i < n; i++) {
                if (c[i].fd < 0 || c[i].t_closed)
                    continue;
                char b = c[i].sent < sizeof HEAD - 1 ? HEAD[c[i].sent] : 'a';
                if (send(c[i].fd, &b, 1, MSG_NOSIGNAL) == 1)
                    c[i].sent++;
            }
            next_send += (int64_t)every_ms * 1000;
        }
        if (now >= next_print) {
            printf("t=%.0fs open %d\n", (double)(now - t0) / 1e6, open_now);
            fflush(stdout);
            next_print += 1000000;
        }
        struct epoll_event evs[256];
        int wait_ms = (int)((next_send < next_print ? next_send : next_print) - now) / 1000;
        int k = epoll_wait(ep, evs, 256, wait_ms > 0 ? wait_ms : 0);
        for (int e = 0; e < k; e++) {
            struct conn *x = &c[evs[e].data.u32];
            char buf[512];
            ssize_t r = recv(x->fd, buf, sizeof buf, 0);
            if (r > 0 || (r < 0 && errno == EAGAIN))
                continue;
            x->t_closed = ifl_now_us();
            epoll_ctl(ep, EPOLL_CTL_DEL, x->fd, NULL);
            close(x->fd);
            open_now--;
        }
    }
    int64_t *life = malloc(sizeof(int64_t) * (size_t)n);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (c[i].t_closed)
            life[m++] = c[i].t_closed - c[i].t_open;
    if (m) {
        qsort(life, (size_t)m, sizeof(int64_t), cmp_i64);
        printf("%d closed by the server after %.2f / %.2f / %.2f s (min / median / max); %d "
               "still open\n",
               m, (double)life[0] / 1e6, (double)life[m / 2] / 1e6, (double)life[m - 1] / 1e6,
               open_now);
    } else {
        printf("none closed by the server; %d still open\n", open_now);
    }
    free(life);
    free(c);
    return 0;
}
