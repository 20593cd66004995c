// GNU extensions the Swift Glibc module hides: pipe2(O_CLOEXEC), posix_spawn_file_actions_addchdir_np and _addclosefrom_np;
// and epoll, which it does not include (the pipes' readiness monitor).
#ifndef SOULACY_CPROCESSSHIMS_H
#define SOULACY_CPROCESSSHIMS_H
#include <spawn.h>
#include <sys/epoll.h>

/* pipe2(O_CLOEXEC) and posix_spawn_file_actions_addchdir_np are GNU extensions the Swift Glibc module hides. */
int soulacy_pipe_cloexec(int fds[2]);
int soulacy_spawn_add_chdir(posix_spawn_file_actions_t *actions, const char *path);
/* posix_spawn_file_actions_addclosefrom_np (glibc 2.34): the child keeps no descriptor from `lowest` up. */
int soulacy_spawn_add_closefrom(posix_spawn_file_actions_t *actions, int lowest);

#endif
