"""Recourse: action sets, individual recourse and collective (online) recourse."""

from recourse_sim.recourse.action_set import ActionSet
from recourse_sim.recourse.individual import RecourseResult, individual_recourse

__all__ = ["ActionSet", "RecourseResult", "individual_recourse"]
