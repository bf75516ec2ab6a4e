"""A program's output as a terminal shows it, for the tests of progress lines."""
import os
import pty


def on_terminal(argv):
    """(exit code, output) of argv run with its stdout on a pseudo-terminal, read to the end."""
    chunks = []
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode()
