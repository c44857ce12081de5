/*
 * test_unsupported.c - the notes of state a checkpoint cannot restore
 * (lib/driver/unsupported.h) on their own, no driver: a note held by an
 * object goes with it and with nothing else, passes to what is made from
 * it, and one held by the process stays; each keeps its call, time and the
 * caller's frame.
 */
#include <string.h>

#include "driver/unsupported.h"
#include "../common/check.h"

static size_t in_force(void)
{
    return tcgpu_unsupported_list(NULL, 0);
}

static int held_notes_go_with_their_object(void)
{
    struct tcgpu_unsupported_note n[4];

    tcgpu_unsupported_reset();
    tcgpu_note_unsupported_held("cuIpcGetEventHandle", "IPC events", TCGPU_HELD_BY_EVENT, 0x1000);
    tcgpu_note_unsupported_held("cuIpcGetEventHandle", "IPC events", TCGPU_HELD_BY_EVENT, 0x1000);
    tcgpu_note_unsupported_held("cuIpcGetEventHandle", "IPC events", TCGPU_HELD_BY_EVENT, 0x2000);
    CHECK(in_force() == 2, "a second note of the same event is one note: %zu", in_force());
    REQUIRE(tcgpu_unsupported_list(n, 4) == 2);
    CHECK(!strcmp(n[0].call, "cuIpcGetEventHandle") && n[0].object == 0x1000 && n[0].realtime_ns > 0);
    /* this program is "the library" here: the first frame outside it is libc's */
    CHECK(!strncmp(n[0].site, "libc.so", 7) || !strncmp(n[0].site, "__libc", 6),
          "the caller's frames: '%s'", n[0].site);

    tcgpu_unsupported_release(TCGPU_HELD_BY_GRAPH, 0x1000);       /* same handle, another kind */
    CHECK(in_force() == 2, "a graph's release took an event's note");
    tcgpu_unsupported_release(TCGPU_HELD_BY_EVENT, 0x3000);
    CHECK(in_force() == 2, "another event's release took a note");
    tcgpu_unsupported_release(TCGPU_HELD_BY_EVENT, 0x1000);
    CHECK(in_force() == 1 && tcgpu_unsupported_first(&n[0]) && n[0].object == 0x2000);
    tcgpu_unsupported_release(TCGPU_HELD_BY_EVENT, 0x2000);
    CHECK(in_force() == 0 && !tcgpu_unsupported_first(NULL));
    CHECK(!tcgpu_unsupported_any_held_by(TCGPU_HELD_BY_EVENT));
    return T_EXIT_PASS;
}

static int process_notes_stay(void)
{
    tcgpu_unsupported_reset();
    tcgpu_note_unsupported("cuMemAlloc", "legacy allocations");
    tcgpu_note_unsupported_held("cuTexObjectCreate", "textures", TCGPU_HELD_BY_TEXTURE, 7);
    tcgpu_unsupported_release(TCGPU_HELD_BY_TEXTURE, 7);
    tcgpu_unsupported_release(TCGPU_HELD_BY_PROCESS, 0);
    CHECK(in_force() == 1, "the process's note went: %zu", in_force());
    return T_EXIT_PASS;
}

static int graphs_pass_their_notes_on(void)
{
    struct tcgpu_unsupported_note n;
    uint64_t given = tcgpu_unsupported_given_to(TCGPU_HELD_BY_GRAPH);

    tcgpu_unsupported_reset();
    tcgpu_note_unsupported_held("cuGraphAddMemAllocNode", "graph memory", TCGPU_HELD_BY_GRAPH, 0xa);
    CHECK(tcgpu_unsupported_given_to(TCGPU_HELD_BY_GRAPH) == given + 1);
    tcgpu_unsupported_inherit(TCGPU_HELD_BY_GRAPH, 0xa, TCGPU_HELD_BY_GRAPH_EXEC, 0xb);
    tcgpu_unsupported_inherit(TCGPU_HELD_BY_GRAPH, 0xc, TCGPU_HELD_BY_GRAPH_EXEC, 0xd);  /* holds nothing */
    CHECK(in_force() == 2, "%zu", in_force());
    tcgpu_unsupported_release(TCGPU_HELD_BY_GRAPH, 0xa);
    REQUIRE(tcgpu_unsupported_first(&n), "the executable graph's note went with its graph");
    CHECK(n.held_by == TCGPU_HELD_BY_GRAPH_EXEC && n.object == 0xb && !strcmp(n.call, "cuGraphAddMemAllocNode"));
    tcgpu_unsupported_release(TCGPU_HELD_BY_GRAPH_EXEC, 0xb);
    CHECK(in_force() == 0);
    return T_EXIT_PASS;
}

static int order_is_kept(void)
{
    struct tcgpu_unsupported_note n[3];

    tcgpu_unsupported_reset();
    for (uint64_t i = 1; i <= 40; i++)          /* grows past the first allocation */
        tcgpu_note_unsupported_held("cuArrayCreate", "arrays", TCGPU_HELD_BY_ARRAY, i);
    for (uint64_t i = 1; i <= 40; i += 2)
        tcgpu_unsupported_release(TCGPU_HELD_BY_ARRAY, i);
    REQUIRE(tcgpu_unsupported_list(n, 3) == 20);
    CHECK(n[0].object == 2 && n[1].object == 4 && n[2].object == 6, "oldest first");
    tcgpu_unsupported_reset();
    CHECK(in_force() == 0 && !tcgpu_unsupported_any_held_by(TCGPU_HELD_BY_ARRAY));
    return T_EXIT_PASS;
}

int main(void)
{
    RUN(held_notes_go_with_their_object);
    RUN(process_notes_stay);
    RUN(graphs_pass_their_notes_on);
    RUN(order_is_kept);
    return T_EXIT_STATUS();
}
