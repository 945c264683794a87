"""The command channel into a sandbox, whatever carries it: the framed protocol of the
in-sandbox helper ``sandboxd`` (``protocol``), its asyncio client (``client``, the helper's
operations, over ``connection``, the stream with its requests in flight; ``answers``, what the
helper's answers mean), the transport over a message stream such as a Kubernetes attach
(``streams``), and an in-process helper for fakes (``emulator``)."""
