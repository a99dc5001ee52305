-- ping: the cheapest round trip. The listener sends it when notifications have been quiet for a while,
-- to find out whether its connection is still alive (a dead TCP peer may otherwise go unnoticed).
SELECT 1 AS ok
