"""What people and earlier runs hand to Coach -- job, cluster and matrix files, run folders -- read under caps and
checked into plain specs, every problem one line naming the file and the field."""
