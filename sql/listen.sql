-- listen: subscribe the listener's own connection to channel `pgq`. Every enqueue, retry, rescue and
-- dirty re-run notifies it with the queue name as payload ('*': wake every worker).
LISTEN pgq
