package chaos

// sysSetns is setns(2)'s number; package syscall predates it.
const sysSetns = 308
