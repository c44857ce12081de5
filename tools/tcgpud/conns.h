/*
 * conns.h - tcgpud's connections (conns.c): the socket, who may hold how
 * many connections (daemon.h, docs/tcgpud.md "Threat model"), replies,
 * refusals, and the events pushed to those who follow them.
 */
#ifndef TCGPU_TCGPUD_CONNS_H
#define TCGPU_TCGPUD_CONNS_H

#include <stdint.h>
#include <sys/types.h>

#include "ctl/proto.h"

/* The listening socket at path, or -errno (logged). */
int open_socket(const char *path);
/* Accept what waits on the socket, within the limits of who may hold how many. */
void accept_all(void);
/*
 * The request waiting on connection ci (a C_READ one), which then becomes
 * C_OP: its answer is the caller's. NULL when there is none to answer: not
 * there yet, or the peer hung up or sent a bad one (answered and closed).
 * The message lives until the next call.
 */
const struct ctl_msg *read_request(int ci);
/* A client waiting for an answer hung up (a job that died in its allocation). */
void peer_gone(int ci);
/* Connections of uid that follow events. */
int followers_of(uid_t uid);

/* Send b, finished, on connection ci; a reply that cannot be delivered is logged. */
void send_msg(int ci, const struct ctl_buf *b);
/* Close connection ci (a free one: nothing), and forget it as any job's waiter. */
void conn_close(int ci);
/* Reply an error to connection ci and close it. */
void reply_error(int ci, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/*
 * Log a line uid can cause at will (a refusal, a reply it did not read; the
 * message from fmt), at most once a second per uid: returns how many of its
 * lines were held back before this one (and counted in the line), or -1
 * when this one is held back.
 */
long note_for_uid(uid_t uid, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Refuse `what` to the peer of ci (EACCES), logged, counted and recorded as an event. */
void refuse(int ci, const char *what, const char *why);

/*
 * Record an event: `type`, the job, and key=value pairs given as a
 * NULL-terminated list of (key, value) strings. Followers get it at once
 * (a follower that cannot keep up is dropped).
 */
void event(const char *type, pid_t pid, ...);
/* Values for event(), formatted into buf (24 bytes). */
const char *u64s(uint64_t v, char *buf);
const char *i64s(int64_t v, char *buf);
const char *msecs(uint64_t ns, char *buf);

#endif
