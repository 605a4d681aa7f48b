"""What a gang is and how it waits: gang assembly from pods (gang), roles of members
(roles), the gang queue with backoff (queue), and per-object crash isolation (isolation).

The bottom layer of the scheduler: it imports only cache/ and policies/.
"""
