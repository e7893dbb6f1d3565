"""A call run in a forked child process while this one goes on: how the report uses a second core.

The child has this process's memory as it was at the fork, so nothing is sent to it; its result comes
back pickled through a pipe.  Forking is Linux's: elsewhere, or where ``fork`` is false, the call runs
here when its result is asked for.  An exception the child raised is raised here; a child that ended
without an answer (killed for memory) leaves the call to this process.
"""

import os
import pickle
import signal
import sys

CAN_FORK = sys.platform.startswith("linux")


class Forked:
    def __init__(self, fn, *args, fork: bool = True):
        self.fn, self.args, self.pid, self.pipe = fn, args, None, None
        if fork and CAN_FORK:
            read, write = os.pipe()
            self.pid = os.fork()
            if self.pid == 0:
                os.close(read)
                _answer(write, fn, args)          # never returns
            os.close(write)
            self.pipe = os.fdopen(read, "rb")

    def result(self):
        """The call's result: the child's, or where there was no child (or it gave no answer), this process's."""
        if self.pid is None:
            return self.fn(*self.args)
        with self.pipe:
            answer = self.pipe.read()
        os.waitpid(self.pid, 0)
        self.pid = None
        try:
            ok, value = pickle.loads(answer)
        except Exception:                   # no answer, or an exception that does not unpickle
            return self.fn(*self.args)
        if not ok:
            raise value
        return value


    def cancel(self):
        """End the child, unanswered (this process no longer needs its result)."""
        if self.pid is not None:
            self.pipe.close()
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = None


def _answer(write: int, fn, args):
    """In the child: write (True, result) or (False, the exception) to the pipe, then end at once (no
    clean-up of what the parent owns: its buffered output, its temporary files)."""
    code = 0
    try:
        try:
            answer = pickle.dumps((True, fn(*args)), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:              # raised in the parent, as if there
            answer = pickle.dumps((False, e), protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(write, "wb") as pipe:
            pipe.write(answer)
    except BaseException:                   # an exception that does not pickle, an interrupt, a closed pipe
        code = 1
    finally:
        os._exit(code)
