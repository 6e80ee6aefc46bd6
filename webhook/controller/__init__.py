"""The adopt-mode controller (SPEC section 11): a layer of its own over the engine and the client.

It creates the AppWrapper for each object admission prepared for adoption, releases the
object's gated pods when Kueue admits, finishes deletes, and reports on the object. Nothing in
the engine or the webhooks imports it.
"""

from webhook.controller.run import Controller, Settings, own_namespace

__all__ = ["Controller", "Settings", "own_namespace"]
